//! Byte-level BPE from the GGUF's own vocabulary and merges.

use std::path::Path;

use edgekv_llm::Gguf;
use edgekv_llm::gguf::Value;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, PreTokenizerWrapper};

use crate::{Error, Result};

/// GGUF token type of control tokens (`<|im_start|>`, `<|im_end|>`, …).
const CONTROL: u64 = 3;

/// Text ↔ token ids with the model's own vocabulary (GPT-2 style byte-level BPE). For SmolLM2
/// (`tokenizer.ggml.pre = "smollm"`) the ids equal llama.cpp's: digits are split one by one
/// before the byte-level regex, and control tokens are matched as whole special tokens.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer").finish_non_exhaustive()
    }
}

fn tok_err(e: impl std::fmt::Display) -> Error {
    Error::Tokenizer(e.to_string())
}

/// A metadata value of `gguf`, or the error naming the missing key.
fn md<'a>(gguf: &Gguf<'a>, key: &str) -> Result<Value<'a>> {
    gguf.get(key)
        .ok_or_else(|| Error::Model(format!("GGUF has no `{key}`")))
}

/// A string value as UTF-8 text.
fn text(v: Value<'_>, key: &str) -> Result<String> {
    let bytes = v
        .as_bytes()
        .ok_or_else(|| Error::Model(format!("`{key}` holds a non-string")))?;
    String::from_utf8(bytes.to_vec())
        .map_err(|_| Error::Model(format!("`{key}` holds a string that is not UTF-8")))
}

/// A string array value as texts.
fn texts(v: Value<'_>, key: &str) -> Result<Vec<String>> {
    v.as_array()
        .ok_or_else(|| Error::Model(format!("`{key}` is not an array")))?
        .iter()
        .map(|v| text(v, key))
        .collect()
}

impl Tokenizer {
    /// Reads the tokenizer of a GGUF file.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let bytes = std::fs::read(path)?;
        let gguf = Gguf::parse(&bytes).map_err(|e| Error::Model(e.to_string()))?;
        Self::from_gguf(&gguf)
    }

    /// Builds the tokenizer from GGUF metadata (`tokenizer.ggml.{model,pre,tokens,merges,
    /// token_type}`). Only `gpt2` models with the `smollm` or `default` pre-tokenizer are
    /// accepted: other pre-tokenizers split text differently and would give wrong ids.
    pub fn from_gguf(gguf: &Gguf<'_>) -> Result<Self> {
        const MODEL: &str = "tokenizer.ggml.model";
        let model = text(md(gguf, MODEL)?, MODEL)?;
        if model != "gpt2" {
            return Err(Error::Model(format!("tokenizer model `{model}`, not gpt2")));
        }
        const PRE: &str = "tokenizer.ggml.pre";
        let digits = match gguf.get(PRE) {
            Some(v) => match text(v, PRE)?.as_str() {
                "smollm" => true,
                "default" => false,
                other => return Err(Error::Model(format!("pre-tokenizer `{other}`"))),
            },
            None => false,
        };
        const TOKENS: &str = "tokenizer.ggml.tokens";
        let names = texts(md(gguf, TOKENS)?, TOKENS)?;
        let mut vocab = ahash::AHashMap::with_capacity(names.len());
        for (id, t) in names.iter().enumerate() {
            vocab.insert(t.clone(), id as u32);
        }
        const MERGES: &str = "tokenizer.ggml.merges";
        let merges = texts(md(gguf, MERGES)?, MERGES)?
            .into_iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| Error::Model(format!("merge `{m}` has no space")))
            })
            .collect::<Result<Vec<_>>>()?;
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(tok_err)?;
        let mut inner = tokenizers::Tokenizer::new(bpe);
        let byte_level = PreTokenizerWrapper::from(ByteLevel::new(false, true, true));
        let pre: PreTokenizerWrapper = if digits {
            Sequence::new(vec![Digits::new(true).into(), byte_level]).into()
        } else {
            byte_level
        };
        inner.with_pre_tokenizer(Some(pre));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        if let Some(types) = gguf
            .get("tokenizer.ggml.token_type")
            .and_then(|v| v.as_array())
        {
            let special: Vec<AddedToken> = types
                .iter()
                .zip(&names)
                .filter(|(t, _)| t.as_u64() == Some(CONTROL))
                .map(|(_, name)| AddedToken::from(name.clone(), true))
                .collect();
            inner.add_special_tokens(special).map_err(tok_err)?;
        }
        Ok(Tokenizer { inner })
    }

    /// Token ids of `text` (no BOS added; control tokens written in the text are matched).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self
            .inner
            .encode_fast(text, false)
            .map_err(tok_err)?
            .get_ids()
            .to_vec())
    }

    /// Text of `ids`, control tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner.decode(ids, false).map_err(tok_err)
    }

    /// The id of a token's exact text (e.g. `<|im_end|>`), if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }
}
