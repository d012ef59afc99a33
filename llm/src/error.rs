//! Errors of the model and the forward pass.

use core::fmt;

use crate::gguf::GgufError;
use crate::role::TensorRole;

/// What went wrong loading a model or running it. Small and `Copy`; nothing here panics on bad
/// input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The file is not a valid GGUF.
    Gguf(GgufError),
    /// `general.architecture` is neither `llama` nor `gemma3`.
    WrongArchitecture,
    /// A required metadata key is absent.
    MissingMetadata(&'static str),
    /// A metadata key has the wrong type or an out-of-range value.
    BadMetadata(&'static str),
    /// A model this forward pass does not implement (the reason says what).
    Unsupported(&'static str),
    /// A tensor the model needs is absent (`layer` is `None` for global tensors).
    MissingTensor {
        /// Block index, if the tensor belongs to a block.
        layer: Option<u16>,
        /// Which tensor.
        role: TensorRole,
    },
    /// A tensor has a shape or type other than the configuration implies.
    TensorMismatch {
        /// Block index, if the tensor belongs to a block.
        layer: Option<u16>,
        /// Which tensor.
        role: TensorRole,
    },
    /// More blocks than [`MAX_LAYERS`](crate::MAX_LAYERS).
    TooManyLayers(usize),
    /// A token id outside the vocabulary.
    TokenOutOfRange(u32),
    /// No tokens given.
    Empty,
    /// A caller buffer is shorter than the plan says (`needed` elements).
    BufferTooSmall {
        /// Elements required.
        needed: usize,
    },
    /// More rows in one call than the scratch buffer was planned for.
    TooManyRows,
    /// A position past the model's context length.
    ContextFull,
    /// Data that must equal what the caller expects does not (what, named).
    Mismatch(&'static str),
    /// A chat script's words are malformed (what, named).
    BadScript(&'static str),
    /// A KV-cache operation failed (a configuration error as [`edgekv::Error::Config`]).
    Kv(edgekv::Error),
    /// Writing or restoring a KV snapshot failed.
    Snapshot(edgekv::snapshot::SnapshotError),
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;

impl From<GgufError> for Error {
    fn from(e: GgufError) -> Self {
        Error::Gguf(e)
    }
}

impl From<edgekv::Error> for Error {
    fn from(e: edgekv::Error) -> Self {
        Error::Kv(e)
    }
}

impl From<edgekv::ConfigError> for Error {
    fn from(e: edgekv::ConfigError) -> Self {
        Error::Kv(e.into())
    }
}

impl From<edgekv::snapshot::SnapshotError> for Error {
    fn from(e: edgekv::snapshot::SnapshotError) -> Self {
        Error::Snapshot(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Gguf(e) => write!(f, "{e}"),
            Error::WrongArchitecture => {
                f.write_str("GGUF architecture is neither llama nor gemma3")
            }
            Error::MissingMetadata(k) => write!(f, "GGUF has no `{k}`"),
            Error::BadMetadata(k) => write!(f, "GGUF `{k}` has a wrong type or value"),
            Error::Unsupported(why) => write!(f, "unsupported model: {why}"),
            Error::MissingTensor { layer, role } => {
                write!(f, "missing tensor {role:?}")?;
                layer.map_or(Ok(()), |l| write!(f, " of block {l}"))
            }
            Error::TensorMismatch { layer, role } => {
                write!(f, "tensor {role:?} has the wrong shape or type")?;
                layer.map_or(Ok(()), |l| write!(f, " in block {l}"))
            }
            Error::TooManyLayers(n) => write!(f, "{n} blocks exceed MAX_LAYERS"),
            Error::TokenOutOfRange(t) => write!(f, "token id {t} is outside the vocabulary"),
            Error::Empty => f.write_str("no tokens"),
            Error::BufferTooSmall { needed } => write!(f, "buffer too small ({needed} needed)"),
            Error::TooManyRows => f.write_str("more rows than the scratch was planned for"),
            Error::ContextFull => f.write_str("position past the model's context"),
            Error::Mismatch(what) => write!(f, "{what} differs from what was expected"),
            Error::BadScript(what) => write!(f, "chat script: bad {what}"),
            Error::Kv(e) => write!(f, "KV cache: {e}"),
            Error::Snapshot(e) => write!(f, "KV snapshot: {e}"),
        }
    }
}

impl core::error::Error for Error {}
