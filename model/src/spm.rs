//! SentencePiece ("llama" tokenizer model in GGUF) as llama.cpp applies it: the vocabulary's
//! user-defined tokens (and, when asked, its control tokens) are cut out of the text first,
//! longest first; every other stretch has its spaces written as `▁` (U+2581, after a leading
//! space when the GGUF asks for one) and is tokenized by merging adjacent pieces, always the
//! pair whose merged text is the vocabulary token with the highest score (the leftmost on ties);
//! characters that no token covers become byte tokens (`<0xNN>`).
//!
//! Written here because no crate does this: Hugging Face's `tokenizers` runs SentencePiece
//! vocabularies either as Unigram (a Viterbi search, which can choose other pieces) or as BPE
//! with explicit merge ranks, which a GGUF's SentencePiece vocabulary does not carry.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use ahash::AHashMap;

use crate::{Error, Result};

/// GGUF token types (`tokenizer.ggml.token_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenType {
    /// An ordinary piece.
    Normal,
    /// The unknown token.
    Unknown,
    /// A control token (`<bos>`, `<start_of_turn>`, …): matched in text only when asked.
    Control,
    /// A user-defined token (runs of spaces or newlines, HTML tags, …): always cut out first.
    UserDefined,
    /// An unused slot.
    Unused,
    /// A byte-fallback token `<0xNN>`.
    Byte,
}

impl TokenType {
    /// The type of GGUF code `code`, if it is one.
    pub fn from_code(code: u64) -> Option<Self> {
        Some(match code {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => return None,
        })
    }
}

/// The word-boundary marker SentencePiece writes for a space.
const SPACE: &str = "\u{2581}";

/// A SentencePiece vocabulary with its scores and token types.
#[derive(Debug)]
pub struct Spm {
    pieces: Vec<Box<[u8]>>,
    scores: Vec<f32>,
    types: Vec<TokenType>,
    ids: AHashMap<Box<[u8]>, u32>,
    /// User-defined, control and unknown tokens, longest text first (ties in id order).
    specials: Vec<u32>,
    bytes: [Option<u32>; 256],
    add_space_prefix: bool,
}

/// A stretch of the input: text still to tokenize, or a token cut out of it.
#[derive(Debug, Clone, Copy)]
enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}

/// One piece of a stretch while merging: its byte range and its neighbours (`usize::MAX`: none).
#[derive(Debug, Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

const NONE: usize = usize::MAX;

/// A candidate merge of two adjacent symbols.
#[derive(Debug, Clone, Copy)]
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    len: usize,
}

impl Ord for Bigram {
    /// Higher score first; on equal scores the leftmost pair first.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

impl Spm {
    /// A vocabulary of `pieces` with their `scores` and `types` (one each per token).
    /// `add_space_prefix`: a space is written before the text at the start and after each
    /// token cut out of it (llama.cpp's `tokenizer.ggml.add_space_prefix`).
    pub fn new(
        pieces: Vec<Box<[u8]>>,
        scores: Vec<f32>,
        types: Vec<TokenType>,
        add_space_prefix: bool,
    ) -> Result<Self> {
        let n = pieces.len();
        if scores.len() != n || types.len() != n {
            return Err(Error::Model(format!(
                "SentencePiece vocabulary of {n} tokens with {} scores and {} types",
                scores.len(),
                types.len()
            )));
        }
        if n > u32::MAX as usize {
            return Err(Error::Model(format!("{n} tokens do not fit u32 ids")));
        }
        let mut ids = AHashMap::with_capacity(n);
        for (id, piece) in pieces.iter().enumerate() {
            // The last of equal texts wins, as in llama.cpp's map.
            ids.insert(piece.clone(), id as u32);
        }
        let mut specials: Vec<u32> = (0..n as u32)
            .filter(|&id| {
                matches!(
                    types[id as usize],
                    TokenType::Control | TokenType::UserDefined | TokenType::Unknown
                ) && !pieces[id as usize].is_empty()
            })
            .collect();
        specials.sort_by_key(|&id| std::cmp::Reverse(pieces[id as usize].len()));
        let mut bytes = [None; 256];
        for (b, slot) in bytes.iter_mut().enumerate() {
            let name = format!("<0x{b:02X}>");
            *slot = ids
                .get(name.as_bytes())
                .or_else(|| ids.get(&[b as u8][..]))
                .copied();
        }
        Ok(Spm {
            pieces,
            scores,
            types,
            ids,
            specials,
            bytes,
            add_space_prefix,
        })
    }

    /// The id of a token's exact text.
    pub fn token_id(&self, piece: &str) -> Option<u32> {
        self.ids.get(piece.as_bytes()).copied()
    }

    /// Token ids of `text` (no BOS). `control`: control tokens written in the text (such as
    /// `<start_of_turn>`) are matched as themselves, as llama.cpp's `parse_special`; otherwise
    /// their text is tokenized like any other. User-defined tokens are always matched.
    pub fn encode(&self, text: &str, control: bool) -> Result<Vec<u32>> {
        let mut fragments = vec![Fragment::Text(text)];
        for &id in &self.specials {
            let skip = matches!(
                self.types[id as usize],
                TokenType::Control | TokenType::Unknown
            );
            if skip && !control {
                continue;
            }
            // Every vocabulary entry came from a GGUF string: not UTF-8 means it cannot occur.
            let Ok(piece) = std::str::from_utf8(&self.pieces[id as usize]) else {
                continue;
            };
            fragments = split_out(fragments, piece, id);
        }
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        let mut after_special = true;
        for fragment in fragments {
            match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Fragment::Text(t) => {
                    let mut escaped = String::with_capacity(t.len() + 3);
                    if self.add_space_prefix && after_special {
                        escaped.push_str(SPACE);
                    }
                    escaped.push_str(&t.replace(' ', SPACE));
                    self.merge(&escaped, &mut out)?;
                    after_special = false;
                }
            }
        }
        Ok(out)
    }

    /// Tokenizes one stretch (spaces already escaped) by score-ordered merges.
    fn merge(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        let bytes = text.as_bytes();
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        for (start, c) in text.char_indices() {
            let i = symbols.len();
            symbols.push(Symbol {
                start,
                len: c.len_utf8(),
                prev: i.wrapping_sub(1),
                next: i + 1,
            });
        }
        let Some(last) = symbols.last_mut() else {
            return Ok(());
        };
        last.next = NONE;
        let mut queue = BinaryHeap::new();
        for i in 1..symbols.len() {
            self.push_bigram(bytes, &symbols, i - 1, i, &mut queue);
        }
        while let Some(b) = queue.pop() {
            let (l, r) = (symbols[b.left], symbols[b.right]);
            // Stale: one side has merged since this pair was queued.
            if l.len == 0 || r.len == 0 || l.len + r.len != b.len {
                continue;
            }
            symbols[b.left].len += r.len;
            symbols[b.right].len = 0;
            symbols[b.left].next = r.next;
            if r.next != NONE {
                symbols[r.next].prev = b.left;
            }
            let prev = symbols[b.left].prev;
            self.push_bigram(bytes, &symbols, prev, b.left, &mut queue);
            let next = symbols[b.left].next;
            self.push_bigram(bytes, &symbols, b.left, next, &mut queue);
        }
        let mut i = 0;
        while i != NONE {
            let s = symbols[i];
            let piece = &bytes[s.start..s.start + s.len];
            match self.ids.get(piece) {
                Some(&id) => out.push(id),
                None => {
                    for &byte in piece {
                        out.push(self.bytes[byte as usize].ok_or_else(|| {
                            Error::Tokenizer(format!(
                                "no token for byte 0x{byte:02X} (no byte fallback)"
                            ))
                        })?);
                    }
                }
            }
            i = s.next;
        }
        Ok(())
    }

    /// Queues the merge of symbols `left` and `right` if their joined text is a token.
    fn push_bigram(
        &self,
        bytes: &[u8],
        symbols: &[Symbol],
        left: usize,
        right: usize,
        queue: &mut BinaryHeap<Bigram>,
    ) {
        if left == NONE || right == NONE {
            return;
        }
        let (l, r) = (symbols[left], symbols[right]);
        let len = l.len + r.len;
        if let Some(&id) = self.ids.get(&bytes[l.start..l.start + len]) {
            queue.push(Bigram {
                left,
                right,
                score: self.scores[id as usize],
                len,
            });
        }
    }

    /// The bytes of `ids`' text: `▁` as a space, byte tokens as their byte, every other token
    /// (control tokens included) as its text. Unknown ids are an error.
    pub fn decode(&self, ids: &[u32]) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        for &id in ids {
            let piece = self
                .pieces
                .get(id as usize)
                .ok_or_else(|| Error::Tokenizer(format!("token id {id} out of range")))?;
            match self.types[id as usize] {
                TokenType::Byte => match byte_of(piece) {
                    Some(b) => out.push(b),
                    None => out.extend_from_slice(piece),
                },
                TokenType::Normal | TokenType::Unused => {
                    let text = String::from_utf8_lossy(piece).replace(SPACE, " ");
                    out.extend_from_slice(text.as_bytes());
                }
                _ => out.extend_from_slice(piece),
            }
        }
        if self.add_space_prefix && out.first() == Some(&b' ') {
            out.remove(0);
        }
        Ok(out)
    }
}

/// The byte of a `<0xNN>` piece.
fn byte_of(piece: &[u8]) -> Option<u8> {
    let hex = piece.strip_prefix(b"<0x")?.strip_suffix(b">")?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

/// Cuts every occurrence of `piece` out of the text fragments (leftmost first), as token `id`.
fn split_out<'t>(fragments: Vec<Fragment<'t>>, piece: &str, id: u32) -> Vec<Fragment<'t>> {
    let mut out = Vec::with_capacity(fragments.len());
    for f in fragments {
        let Fragment::Text(mut t) = f else {
            out.push(f);
            continue;
        };
        while let Some(at) = t.find(piece) {
            if at > 0 {
                out.push(Fragment::Text(&t[..at]));
            }
            out.push(Fragment::Token(id));
            t = &t[at + piece.len()..];
        }
        if !t.is_empty() {
            out.push(Fragment::Text(t));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(entries: &[(&str, f32, TokenType)], prefix: bool) -> Spm {
        let mut pieces = Vec::new();
        let mut scores = Vec::new();
        let mut types = Vec::new();
        for &(p, s, t) in entries {
            pieces.push(p.as_bytes().to_vec().into_boxed_slice());
            scores.push(s);
            types.push(t);
        }
        for b in 0..=255u8 {
            pieces.push(format!("<0x{b:02X}>").into_bytes().into_boxed_slice());
            scores.push(0.0);
            types.push(TokenType::Byte);
        }
        Spm::new(pieces, scores, types, prefix).unwrap()
    }

    use TokenType::*;

    #[test]
    fn merges_follow_scores_not_order() {
        // "abc": "ab" (score -2) and "bc" (score -1) compete; "bc" wins, then "a"+"bc".
        let v = vocab(
            &[
                ("a", 0.0, Normal),
                ("b", 0.0, Normal),
                ("c", 0.0, Normal),
                ("ab", -2.0, Normal),
                ("bc", -1.0, Normal),
                ("abc", -5.0, Normal),
            ],
            false,
        );
        assert_eq!(v.encode("abc", false).unwrap(), [5]);
        assert_eq!(v.encode("abcb", false).unwrap(), [5, 1]);
        // Equal scores: the leftmost pair merges first.
        let v = vocab(&[("a", 0.0, Normal), ("aa", -1.0, Normal)], false);
        assert_eq!(v.encode("aaa", false).unwrap(), [1, 0]);
    }

    #[test]
    fn unknown_characters_fall_back_to_bytes() {
        let v = vocab(&[("x", 0.0, Normal)], false);
        let ids = v.encode("xé", false).unwrap();
        // é is 0xC3 0xA9: byte tokens follow the one entry.
        assert_eq!(ids, [0, 1 + 0xC3, 1 + 0xA9]);
        assert_eq!(v.decode(&ids).unwrap(), "xé".as_bytes());
    }

    #[test]
    fn spaces_are_escaped_and_specials_cut_out_longest_first() {
        let v = vocab(
            &[
                ("\u{2581}hi", -1.0, Normal),
                ("\u{2581}", -2.0, Normal),
                ("h", -3.0, Normal),
                ("i", -3.0, Normal),
                ("\n", 0.0, UserDefined),
                ("\n\n", 0.0, UserDefined),
                ("<ctl>", 0.0, Control),
                ("<", 0.0, Normal),
                ("hi", -1.5, Normal),
            ],
            false,
        );
        assert_eq!(v.encode(" hi\n\n\n hi", false).unwrap(), [0, 5, 4, 0]);
        // Control tokens only when asked.
        assert_eq!(v.encode("<ctl>", true).unwrap(), [6]);
        assert_ne!(v.encode("<ctl>", false).unwrap(), [6]);
        assert_eq!(v.decode(&[0, 5, 4, 0]).unwrap(), " hi\n\n\n hi".as_bytes());
    }

    #[test]
    fn a_space_prefix_is_added_and_removed() {
        let v = vocab(
            &[
                ("\u{2581}hi", -1.0, Normal),
                ("h", -3.0, Normal),
                ("i", -3.0, Normal),
                ("hi", -1.5, Normal),
            ],
            true,
        );
        assert_eq!(v.encode("hi", false).unwrap(), [0]);
        assert_eq!(v.decode(&[0]).unwrap(), b"hi");
    }

    #[test]
    fn bad_vocabularies_and_ids_are_errors() {
        assert!(Spm::new(vec![b"a".to_vec().into()], vec![], vec![Normal], false).is_err());
        let v = vocab(&[("a", 0.0, Normal)], false);
        assert!(v.decode(&[100_000]).is_err());
        // Without byte tokens an unknown character cannot be written.
        let v = Spm::new(vec![b"a".to_vec().into()], vec![0.0], vec![Normal], false).unwrap();
        assert!(v.encode("b", false).is_err());
        assert_eq!(v.encode("", false).unwrap(), Vec::<u32>::new());
    }
}
