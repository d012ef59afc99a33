//! The crate's error type.

use std::fmt;

/// Everything that can go wrong loading or running the model.
#[derive(Debug)]
pub enum Error {
    /// Reading the model file.
    Io(std::io::Error),
    /// candle: GGUF parsing, tensors, matmuls.
    Candle(candle_core::Error),
    /// The KV cache refused a call.
    Cache(edgekv::Error),
    /// Building or running the tokenizer.
    Tokenizer(String),
    /// The GGUF lacks a key or tensor this model needs, or holds an unsupported value.
    Model(String),
    /// A caller's argument: empty prompt, token id out of the vocabulary, positions past the
    /// sequence.
    Input(String),
}

/// Result with the crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "i/o: {e}"),
            Error::Candle(e) => write!(f, "candle: {e}"),
            Error::Cache(e) => write!(f, "kv cache: {e}"),
            Error::Tokenizer(e) => write!(f, "tokenizer: {e}"),
            Error::Model(e) => write!(f, "model: {e}"),
            Error::Input(e) => write!(f, "input: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

impl From<candle_core::Error> for Error {
    fn from(e: candle_core::Error) -> Self {
        Error::Candle(e)
    }
}

impl From<edgekv::Error> for Error {
    fn from(e: edgekv::Error) -> Self {
        Error::Cache(e)
    }
}

impl From<edgekv::ConfigError> for Error {
    fn from(e: edgekv::ConfigError) -> Self {
        Error::Cache(e.into())
    }
}
