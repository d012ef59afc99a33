//! The Gemma 3 board demo's token ids (`xtask/src/gemma_script.rs`, which the task runner hands
//! to the Cortex-M55) are what Gemma's SentencePiece tokenizer gives: the document with its BOS,
//! and the document followed by each request's text as the document's ids followed by the
//! request's (so the board's prompt is the tokenizer's prompt). Needs `model/fetch-gemma.sh`.

use edgekv_model::{Tokenizer, gemma_path};

/// The board demo's script (text and ids), as the task runner hands it to the board.
#[allow(dead_code)]
mod gemma_script {
    include!("../../xtask/src/gemma_script.rs");
}

#[test]
fn the_board_gemma_script_ids_are_the_tokenizers() {
    let t = Tokenizer::load(gemma_path())
        .unwrap_or_else(|e| panic!("{e} (run model/fetch-gemma.sh first)"));
    let document = t.encode_document(gemma_script::DOCUMENT).unwrap();
    assert_eq!(document, gemma_script::DOCUMENT_IDS, "document");
    assert_eq!(document.len() % 16, 0, "whole pages of 16");
    for (text, ids, _, _) in gemma_script::REQUESTS {
        let whole = t
            .encode_document(&format!("{}{text}", gemma_script::DOCUMENT))
            .unwrap();
        let (head, tail) = whole.split_at(document.len().min(whole.len()));
        assert_eq!(head, document, "request {text:?}: the document's ids first");
        assert_eq!(tail, ids, "request {text:?}");
    }
    assert_eq!(t.token_id("<eos>"), Some(gemma_script::STOP[0]));
    assert_eq!(t.decode(&document[1..]).unwrap(), gemma_script::DOCUMENT);
}
