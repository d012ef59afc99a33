//! Gemma 3's SentencePiece tokenizer against llama.cpp's ids (`tests/data/gen_gemma_tokens.py`
//! wrote them with llama-cpp-python 0.3.36): the whole GPL-3 text as a document, short texts
//! with and without control tokens matched, chat prompts in Gemma's template, and decoding back.

use std::sync::OnceLock;

use edgekv_llm::Gguf;
use edgekv_model::{ChatTemplate, Message, Role, Tokenizer, gemma_path, model_path};

fn tokenizer() -> &'static Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        Tokenizer::load(gemma_path())
            .unwrap_or_else(|e| panic!("{e} (run model/fetch-gemma.sh first)"))
    })
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("id list")
        .iter()
        .map(|i| i.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn gpl3_ids_equal_llama_cpps() {
    let text = std::fs::read_to_string("/usr/share/common-licenses/GPL-3").expect("GPL-3 text");
    let want: Vec<u32> = include_str!("data/gemma_gpl3_ids.txt")
        .lines()
        .map(|l| l.parse().expect("id"))
        .collect();
    let got = tokenizer().encode_document(&text).unwrap();
    if let Some(at) = got.iter().zip(&want).position(|(a, b)| a != b) {
        panic!(
            "first difference at id {at}: ours {:?}, llama.cpp's {:?}",
            &got[at..(at + 8).min(got.len())],
            &want[at..(at + 8).min(want.len())]
        );
    }
    assert_eq!(got.len(), want.len());
    assert_eq!(
        want.len(),
        7563,
        "MODEL-NOTES.md: GPL-3 is 7,563 ids with BOS"
    );
    assert_eq!(tokenizer().bos(), Some(2));
    // Decoding gives the text back (after the BOS).
    assert_eq!(tokenizer().decode(&got[1..]).unwrap(), text);
}

#[test]
fn short_texts_and_chat_prompts_equal_llama_cpps() {
    let cases: serde_json::Value =
        serde_json::from_str(include_str!("data/gemma_cases.json")).expect("cases");
    let t = tokenizer();
    for case in cases.as_array().expect("case list") {
        let text = case["text"].as_str().expect("text");
        assert_eq!(
            t.encode_document(text).unwrap(),
            ids(&case["document"]),
            "document {text:?}"
        );
        let special = t.encode(text).unwrap();
        assert_eq!(
            special,
            ids(&case["special"]),
            "control tokens matched {text:?}"
        );
        assert_eq!(t.decode(&special).unwrap(), text, "round trip {text:?}");
    }
}

#[test]
fn control_tokens_are_single_ids() {
    let t = tokenizer();
    assert_eq!(t.token_id("<start_of_turn>"), Some(105));
    assert_eq!(t.token_id("<end_of_turn>"), Some(106));
    let ids = t.encode("<start_of_turn>user\nHi<end_of_turn>").unwrap();
    assert_eq!(ids.first(), Some(&105));
    assert_eq!(ids.last(), Some(&106));
    // As a document the same text is plain text: no control ids at all.
    let doc = t.encode_document("<start_of_turn>user").unwrap();
    assert!(!doc[1..].contains(&105), "{doc:?}");
}

#[test]
fn chat_templates_follow_the_gguf() {
    for (path, want) in [
        (gemma_path(), ChatTemplate::Gemma),
        (model_path(), ChatTemplate::ChatMl),
    ] {
        let bytes = std::fs::read(&path).expect("model file");
        let gguf = Gguf::parse(&bytes).expect("GGUF");
        assert_eq!(
            ChatTemplate::from_gguf(&gguf).unwrap(),
            want,
            "{}",
            path.display()
        );
    }
    // A Gemma chat prompt's ids: control tokens single, the turn opened for the model.
    let prompt = ChatTemplate::Gemma.render(
        &[Message {
            role: Role::User,
            text: "Is bed A dry?",
        }],
        true,
    );
    let ids = tokenizer().encode(&prompt).unwrap();
    assert_eq!(&ids[..3], [105, 2364, 107], "<start_of_turn>user\n");
    assert_eq!(
        &ids[ids.len() - 3..],
        [105, 4368, 107],
        "<start_of_turn>model\n"
    );
}
