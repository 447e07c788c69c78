use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Die quietly on a closed pipe (`sluice stats | head`), like other CLIs,
    // instead of panicking in println!.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = sluice::cli::Cli::parse();
    match sluice::cli::main(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", sluice::error::one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
