//! edgekv's task runner as a library: fresh-machine set-up, QEMU runs of the board firmware with
//! the defmt log decoded in process, the firmware size report and the stage timer; with feature
//! `chat`, the Cortex-M55 chat's host side (`an547`, `transcript`; its script in
//! [`chat_script`]). The binary (`src/main.rs`) is what the cargo aliases `demo`, `test-all` and
//! `xtask` run; host tests that run the firmware (`host-tests/tests/board_parity.rs`,
//! `llm_board.rs`) use [`qemu`] and `an547` directly.

pub mod aarch64;
#[cfg(feature = "chat")]
pub mod an547;
pub mod callgraph;
/// The Cortex-M55 chat's script: SmolLM2's ChatML text and its token ids, as `model/`'s
/// tokenizer gives them (`model/tests/tokenizer.rs` checks every pair; `cargo run --release
/// --bin tokenize -- TEXT` in `model/` prints the ids of new text). Plain constants, so that
/// test can `include!` the file.
pub mod chat_script;
#[cfg(feature = "chat")]
pub mod gemma;
/// The Gemma 3 board demo's script: a shared plain-text document (the pretrained GGUF continues
/// text well) and the requests that continue it, with their token ids as `model/`'s Gemma
/// tokenizer gives them (`model/tests/gemma_demo_ids.rs` checks them). Plain constants, so that
/// test can `include!` the file.
pub mod gemma_script;
pub mod qemu;
pub mod setup;
pub mod size;
pub mod stages;
#[cfg(feature = "chat")]
pub mod transcript;
