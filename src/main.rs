use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = sluice::cli::Cli::parse();
    match sluice::cli::main(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", sluice::check::one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
