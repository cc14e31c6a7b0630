//! The `convstore` binary.

fn main() -> std::process::ExitCode {
    convstore_cli::run()
}
