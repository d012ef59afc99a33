//! Token ids of each argument as the model's tokenizer gives them (special tokens such as
//! `<|im_start|>` or `<start_of_turn>` included): `cargo run --release --bin tokenize -- "text"
//! ...`; `--gemma` first for Gemma 3 270M's tokenizer (`model/fetch-gemma.sh`) instead of
//! SmolLM2's.

use edgekv_model::{Tokenizer, gemma_path, model_path};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1).peekable();
    let path = if args.peek().map(String::as_str) == Some("--gemma") {
        args.next();
        gemma_path()
    } else {
        model_path()
    };
    let tokenizer = Tokenizer::load(path)?;
    for text in args {
        let ids = tokenizer.encode(&text)?;
        println!("{} ids: {ids:?}", ids.len());
    }
    Ok(())
}
