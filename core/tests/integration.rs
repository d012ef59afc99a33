//! The core's integration tests, one module per file of `tests/`, in one binary: the cache is
//! generic, so each test binary used to compile and link its own copy of it (fourteen of them).
//! Run one file's tests by its module path: `cargo test -p edgekv --features std --test
//! integration pool_model::`. Files that need heap arenas are compiled with the `alloc`
//! feature (`std` for the cost comparison), as their `required-features` were before.

#[cfg(feature = "alloc")]
mod common;

#[cfg(feature = "alloc")]
mod attention;
#[cfg(feature = "alloc")]
mod faults;
#[cfg(feature = "std")]
mod grouped_cost;
#[cfg(feature = "alloc")]
mod grouped_faults;
#[cfg(feature = "alloc")]
mod grouped_gemma;
#[cfg(feature = "alloc")]
mod grouped_model;
#[cfg(feature = "alloc")]
mod grouped_prefix;
#[cfg(feature = "alloc")]
mod multi_turn;
mod pool_model;
mod prefix_model;
#[cfg(feature = "alloc")]
mod prefix_reuse;
#[cfg(feature = "alloc")]
mod snapshot;
#[cfg(feature = "alloc")]
mod snapshot_store;
mod static_arenas;

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
