//! Text ↔ token ids with the GGUF's own vocabulary: byte-level BPE (`gpt2`, SmolLM2) through
//! the `tokenizers` crate, SentencePiece (`llama`, Gemma 3) through [`crate::spm`].

use std::path::Path;

use edgekv_llm::Gguf;
use edgekv_llm::gguf::Value;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, PreTokenizerWrapper};

use crate::spm::{Spm, TokenType};
use crate::{Error, Result};

/// GGUF token type of control tokens (`<|im_start|>`, `<|im_end|>`, …).
const CONTROL: u64 = 3;

/// Text ↔ token ids with the model's own vocabulary, ids equal to llama.cpp's:
/// - GPT-2 style byte-level BPE (`tokenizer.ggml.model = "gpt2"`): for SmolLM2
///   (`tokenizer.ggml.pre = "smollm"`) digits are split one by one before the byte-level regex,
///   and control tokens are matched as whole special tokens;
/// - SentencePiece (`"llama"`, Gemma 3): user-defined tokens cut out first, then score-ordered
///   merges with byte fallback ([`crate::spm`]).
pub struct Tokenizer {
    inner: Inner,
    bos: Option<u32>,
}

/// The tokenizer model.
enum Inner {
    Bpe(Box<tokenizers::Tokenizer>),
    Spm(Box<Spm>),
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
    /// scores,token_type,add_space_prefix,bos_token_id,add_bos_token}`). Accepted: `gpt2`
    /// models with the `smollm` or `default` pre-tokenizer, and `llama` (SentencePiece) models
    /// with the `default` one: other pre-tokenizers split text differently and would give
    /// wrong ids.
    pub fn from_gguf(gguf: &Gguf<'_>) -> Result<Self> {
        const MODEL: &str = "tokenizer.ggml.model";
        let model = text(md(gguf, MODEL)?, MODEL)?;
        let inner = match model.as_str() {
            "gpt2" => Inner::Bpe(Box::new(bpe(gguf)?)),
            "llama" => Inner::Spm(Box::new(spm(gguf)?)),
            other => {
                return Err(Error::Model(format!(
                    "tokenizer model `{other}`: only gpt2 (BPE) and llama (SentencePiece)"
                )));
            }
        };
        const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
        // llama.cpp's defaults when the key is absent: SentencePiece adds BOS, BPE does not.
        let add_bos = match gguf.get(ADD_BOS) {
            Some(v) => v
                .as_bool()
                .ok_or_else(|| Error::Model(format!("`{ADD_BOS}` is not a bool")))?,
            None => matches!(inner, Inner::Spm(_)),
        };
        const BOS: &str = "tokenizer.ggml.bos_token_id";
        let bos = match (add_bos, gguf.get(BOS)) {
            (false, _) => None,
            (true, None) => {
                return Err(Error::Model(format!(
                    "GGUF asks for BOS but has no `{BOS}`"
                )));
            }
            (true, Some(v)) => Some(
                v.as_u64()
                    .and_then(|id| u32::try_from(id).ok())
                    .ok_or_else(|| Error::Model(format!("`{BOS}` is not a token id")))?,
            ),
        };
        Ok(Tokenizer { inner, bos })
    }
}

/// The byte-level BPE tokenizer of a `gpt2` GGUF.
fn bpe(gguf: &Gguf<'_>) -> Result<tokenizers::Tokenizer> {
    {
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
        Ok(inner)
    }
}

/// The SentencePiece tokenizer of a `llama` GGUF.
fn spm(gguf: &Gguf<'_>) -> Result<Spm> {
    const PRE: &str = "tokenizer.ggml.pre";
    if let Some(v) = gguf.get(PRE) {
        let pre = text(v, PRE)?;
        if pre != "default" {
            return Err(Error::Model(format!("SentencePiece pre-tokenizer `{pre}`")));
        }
    }
    const TOKENS: &str = "tokenizer.ggml.tokens";
    let pieces: Vec<Box<[u8]>> = md(gguf, TOKENS)?
        .as_array()
        .ok_or_else(|| Error::Model(format!("`{TOKENS}` is not an array")))?
        .iter()
        .map(|v| {
            v.as_bytes()
                .map(|b| b.to_vec().into_boxed_slice())
                .ok_or_else(|| Error::Model(format!("`{TOKENS}` holds a non-string")))
        })
        .collect::<Result<_>>()?;
    const SCORES: &str = "tokenizer.ggml.scores";
    let scores: Vec<f32> = md(gguf, SCORES)?
        .as_array()
        .ok_or_else(|| Error::Model(format!("`{SCORES}` is not an array")))?
        .iter()
        .map(|v| {
            v.as_f32()
                .ok_or_else(|| Error::Model(format!("`{SCORES}` holds a non-f32")))
        })
        .collect::<Result<_>>()?;
    const TYPES: &str = "tokenizer.ggml.token_type";
    let types: Vec<TokenType> = md(gguf, TYPES)?
        .as_array()
        .ok_or_else(|| Error::Model(format!("`{TYPES}` is not an array")))?
        .iter()
        .map(|v| {
            v.as_u64()
                .and_then(TokenType::from_code)
                .ok_or_else(|| Error::Model(format!("`{TYPES}` holds an unknown type")))
        })
        .collect::<Result<_>>()?;
    const PREFIX: &str = "tokenizer.ggml.add_space_prefix";
    // llama.cpp's default for SentencePiece when the key is absent.
    let prefix = match gguf.get(PREFIX) {
        Some(v) => v
            .as_bool()
            .ok_or_else(|| Error::Model(format!("`{PREFIX}` is not a bool")))?,
        None => true,
    };
    Spm::new(pieces, scores, types, prefix)
}

impl Tokenizer {
    /// Token ids of `text` (no BOS added; control tokens written in the text, such as
    /// `<|im_start|>` or `<start_of_turn>`, are matched as themselves).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match &self.inner {
            Inner::Bpe(t) => Ok(t
                .encode_fast(text, false)
                .map_err(tok_err)?
                .get_ids()
                .to_vec()),
            Inner::Spm(s) => s.encode(text, true),
        }
    }

    /// Token ids of `text` as a document: the BOS the GGUF asks for first (see [`Self::bos`]),
    /// and control tokens' texts tokenized as plain text (llama.cpp's `tokenize` with
    /// `add_special` on and `parse_special` off). SentencePiece models only: the BPE path
    /// always matches control tokens, so it is an error there.
    pub fn encode_document(&self, text: &str) -> Result<Vec<u32>> {
        let Inner::Spm(s) = &self.inner else {
            return Err(Error::Tokenizer(
                "documents with plain control-token text: SentencePiece models only".into(),
            ));
        };
        let mut ids: Vec<u32> = self.bos.into_iter().collect();
        ids.extend(s.encode(text, false)?);
        Ok(ids)
    }

    /// The BOS id a prompt starts with, if the GGUF asks for one (`add_bos_token`).
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// Text of `ids`, control tokens included (byte tokens that do not form UTF-8 are replaced
    /// by U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        match &self.inner {
            Inner::Bpe(t) => t.decode(ids, false).map_err(tok_err),
            Inner::Spm(s) => Ok(String::from_utf8_lossy(&s.decode(ids)?).into_owned()),
        }
    }

    /// The id of a token's exact text (e.g. `<|im_end|>`), if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        match &self.inner {
            Inner::Bpe(t) => t.token_to_id(token),
            Inner::Spm(s) => s.token_id(token),
        }
    }
}
