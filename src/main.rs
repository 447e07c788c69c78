/// jemalloc rather than glibc's `malloc`: a drain makes memory on one
/// thread and frees it on another, on many threads at once, and glibc's
/// arenas spent about a fifth of the workers' time on it (the README's
/// "Another allocator" has the figures).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // SIGPIPE stays ignored, as Rust sets it: a host writing to a broker's
    // socket that was just closed gets EPIPE and reconnects, where the
    // signal's default would kill it without a word. The command line's
    // output ends quietly on a closed pipe through `cli::outln!` instead.
    sluice::cli::main().await
}
