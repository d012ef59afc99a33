//! Token ids of each argument as the model's tokenizer gives them (special tokens such as
//! `<|im_start|>` included): `cargo run --release --bin tokenize -- "text" ...`.

use edgekv_model::{Tokenizer, model_path};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tokenizer = Tokenizer::load(model_path())?;
    for text in std::env::args().skip(1) {
        let ids = tokenizer.encode(&text)?;
        println!("{} ids: {ids:?}", ids.len());
    }
    Ok(())
}
