//! The `leasehold` binary: parses the command line and hands over to [`leasehold::cli`].

fn main() -> std::process::ExitCode {
    leasehold::cli::main()
}
