//! The host-only demo session (`cargo demo --host`): a SmolLM2-shaped session with fork,
//! truncate and contiguous growth.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    edgekv_host_tests::demo::run(&mut std::io::stdout())
}
