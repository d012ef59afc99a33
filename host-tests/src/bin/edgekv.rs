//! `edgekv`: quantize / dequantize .npy arrays exactly as edgekv's pages do (see
//! `edgekv_host_tests::cli`).

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    match edgekv_host_tests::cli::run(edgekv_host_tests::cli::Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("edgekv: {e}");
            ExitCode::FAILURE
        }
    }
}
