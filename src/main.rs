use clap::Parser;

/// jemalloc rather than glibc's `malloc`: a drain makes memory on one
/// thread and frees it on another, on many threads at once, and glibc's
/// arenas spent about a fifth of the workers' time on it (the README's
/// "Another allocator" has the figures).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
