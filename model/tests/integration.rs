//! The model's integration tests, one module per file of `tests/`, in one binary: each test
//! binary used to compile and link its own copy of the forward pass in release. Run one file's
//! tests by its module path: `cargo test --release --test integration reuse::`. Tests of Gemma 3 270M skip with a notice when its file is missing.

mod common;
mod gemma_common;
mod llama_cpp;

mod fidelity;
mod gemma;
mod gemma_demo_ids;
mod gemma_session;
mod gemma_tokenizer;
// candle-transformers' quantized llama (`--features candle`).
#[cfg(feature = "candle")]
mod reference;
mod reuse;
mod smollm2;
mod teacher;
mod tokenizer;

/// Every file of `tests/` is a module of this binary (with `autotests = false`, cargo would
/// silently skip a new file that is not declared above).
#[test]
fn every_test_file_is_declared() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let root = std::fs::read_to_string(dir.join("integration.rs")).unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.extension().is_some_and(|e| e == "rs") && name != "integration" {
            assert!(
                root.contains(&format!("\nmod {name};")),
                "tests/{name}.rs is not declared in tests/integration.rs"
            );
        }
    }
}
