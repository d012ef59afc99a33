//! The crate's error type.

use std::fmt;

/// Everything that can go wrong loading or running the model.
#[derive(Debug)]
pub enum Error {
    /// Reading a file.
    Io(std::io::Error),
    /// The KV cache refused a call.
    Cache(edgekv::Error),
    /// Building or running the tokenizer.
    Tokenizer(String),
    /// The GGUF is not a llama model this forward pass runs (the reader's precise error), or the
    /// file cannot be read.
    Model(String),
    /// A caller's argument: empty prompt, token id out of the vocabulary, positions past the
    /// model's context.
    Input(String),
}

/// Result with the crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "i/o: {e}"),
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

impl From<edgekv::Error> for Error {
    fn from(e: edgekv::Error) -> Self {
        Error::Cache(e)
    }
}

/// The forward pass's errors, sorted by whose mistake they are: the cache's, the caller's
/// arguments, or the model file.
impl From<edgekv_llm::Error> for Error {
    fn from(e: edgekv_llm::Error) -> Self {
        use edgekv_llm::Error as E;
        match e {
            E::Kv(e) => Error::Cache(e),
            E::TokenOutOfRange(_) | E::Empty | E::ContextFull => Error::Input(e.to_string()),
            _ => Error::Model(e.to_string()),
        }
    }
}

impl From<edgekv::ConfigError> for Error {
    fn from(e: edgekv::ConfigError) -> Self {
        Error::Cache(e.into())
    }
}
