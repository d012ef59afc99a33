//! `edgekv`: quantize / dequantize .npy arrays exactly as edgekv's pages do, write and inspect KV
//! snapshot images, and plan arenas (see the `cli` module for the commands).

mod cli;
mod plan;
mod snapshot_tool;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run(cli::Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("edgekv: {e}");
            ExitCode::FAILURE
        }
    }
}
