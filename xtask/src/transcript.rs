//! The Cortex-M55 chat's transcript: generated ids printed as text with the model's own
//! vocabulary (read from the GGUF: byte-level BPE for SmolLM2, SentencePiece pieces for Gemma 3),
//! per-turn instruction counts from the firmware's events ([`crate::an547::event`]) and, for a
//! layer-grouped cache, each group's pages.

use std::io::Write;

use edgekv_llm::Gguf;
use edgekv_llm::chat::{Event, Start};

use crate::an547::event;

/// The model's vocabulary as bytes, for printing generated ids: byte-level BPE (each character
/// of a token stands for one byte, GPT-2's mapping) or, when the GGUF's `tokenizer.ggml.model`
/// is `llama`, SentencePiece pieces (`▁` a space, `<0xNN>` byte fallback).
pub struct Vocab {
    tokens: Vec<Vec<u8>>,
}

impl Vocab {
    /// From the GGUF's `tokenizer.ggml.tokens` (control tokens such as `<|im_end|>` verbatim).
    pub fn new(model: &[u8]) -> Result<Self, String> {
        let gguf = Gguf::parse(model).map_err(|e| e.to_string())?;
        let tokens = gguf
            .get("tokenizer.ggml.tokens")
            .and_then(|v| v.as_array())
            .ok_or("GGUF has no tokenizer.ggml.tokens")?;
        let spm = gguf.get("tokenizer.ggml.model").and_then(|v| v.as_bytes()) == Some(b"llama");
        let byte_of = byte_map();
        let tokens = tokens
            .iter()
            .map(|v| {
                let text = String::from_utf8_lossy(v.as_bytes().unwrap_or_default()).into_owned();
                let control = text.starts_with("<|") && text.ends_with("|>");
                if spm {
                    piece_bytes(&text)
                } else if control {
                    text.into_bytes()
                } else {
                    text.chars()
                        .map(|c| byte_of.get(&c).copied().unwrap_or(b'?'))
                        .collect()
                }
            })
            .collect();
        Ok(Vocab { tokens })
    }

    /// The bytes of `id` (empty for an unknown id).
    pub fn bytes(&self, id: u32) -> &[u8] {
        self.tokens.get(id as usize).map_or(&[], Vec::as_slice)
    }
}

/// The bytes of a SentencePiece piece: `<0xNN>` is byte NN, `▁` a space, anything else itself.
fn piece_bytes(piece: &str) -> Vec<u8> {
    let hex = piece
        .strip_prefix("<0x")
        .and_then(|h| h.strip_suffix('>'))
        .filter(|h| h.len() == 2)
        .and_then(|h| u8::from_str_radix(h, 16).ok());
    match hex {
        Some(b) => vec![b],
        None => piece.replace('\u{2581}', " ").into_bytes(),
    }
}

/// GPT-2's byte-level alphabet, inverted: its printable bytes stand for themselves, the other 68
/// were shifted in order to U+0100 and up.
fn byte_map() -> std::collections::HashMap<char, u8> {
    let mut shifted = 0u32;
    (0..=255u8)
        .map(|b| {
            let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
            let c = if printable {
                char::from(b)
            } else {
                shifted += 1;
                char::from_u32(255 + shifted).unwrap_or(char::REPLACEMENT_CHARACTER)
            };
            (c, b)
        })
        .collect()
}

/// Millions of instructions, one decimal.
fn mi(n: u64) -> String {
    format!("{:.1} M", n as f64 / 1e6)
}

/// Turns the firmware's chat events into a readable transcript as they arrive (other log lines
/// are printed as they are).
pub struct Transcript {
    vocab: Vocab,
    users: Vec<String>,
    /// Ids not printed (they end an answer).
    stop: Vec<u32>,
    /// A document continued (Gemma 3), not a chat.
    document: bool,
    restore: u64,
    first: Option<(Start, u64, u32, u32)>,
    steps: Vec<u64>,
    pending: Vec<u8>,
}

impl Transcript {
    /// A transcript printer for `model`'s vocabulary; `users` are the turns' user words.
    pub fn new(model: &[u8], users: Vec<String>) -> Result<Self, String> {
        Ok(Transcript {
            vocab: Vocab::new(model)?,
            users,
            stop: crate::chat_script::STOP.to_vec(),
            document: false,
            restore: 0,
            first: None,
            steps: Vec::new(),
            pending: Vec::new(),
        })
    }

    /// A transcript printer for a shared document continued by requests (Gemma 3's board demo):
    /// `requests` are the text each request appends to the document, `stop` the ids that end a
    /// continuation.
    pub fn document(model: &[u8], requests: Vec<String>, stop: &[u32]) -> Result<Self, String> {
        let mut t = Transcript::new(model, requests)?;
        t.stop = stop.to_vec();
        t.document = true;
        Ok(t)
    }

    /// Prints the text of `token` (held back while its UTF-8 is incomplete; `<|im_end|>` not
    /// printed).
    fn token(&mut self, out: &mut dyn Write, token: u32) {
        if self.stop.contains(&token) {
            return;
        }
        self.pending.extend_from_slice(self.vocab.bytes(token));
        if let Ok(text) = std::str::from_utf8(&self.pending) {
            let _ = write!(out, "{text}");
            let _ = out.flush();
            self.pending.clear();
        }
    }

    /// Handles one log line.
    pub fn line(&mut self, out: &mut dyn Write, line: &str) {
        let Some(e) = event(line) else {
            let _ = writeln!(out, "  | {line}");
            return;
        };
        match e {
            Event::Restored { tokens, cost } => {
                self.restore = cost;
                let what = if self.document {
                    "shared document"
                } else {
                    "system prompt"
                };
                let _ = writeln!(
                    out,
                    "  [{what}: {tokens} tokens of KV restored from the flash image in {} instructions]",
                    mi(cost)
                );
            }
            Event::First {
                turn,
                start,
                prefilled,
                reused,
                token,
                cost,
                ..
            } => {
                if start == Start::Cold {
                    let _ = writeln!(
                        out,
                        "  [cold start: system prompt + turn 1 prefilled, {prefilled} tokens: {} instructions to the first token]",
                        mi(cost)
                    );
                    return;
                }
                let user = self.users.get(turn).map_or("?", String::as_str);
                if self.document {
                    let how = if start == Start::Reused {
                        "a new request: the document's pages reused from the prefix index"
                    } else {
                        "continuing the restored document"
                    };
                    let _ = write!(out, "\n  --- request {} ({how}) ---\n…{user}", turn + 1);
                } else {
                    if start == Start::Reused {
                        let _ = writeln!(out, "\n  --- a new conversation ---");
                    }
                    let _ = write!(out, "\nuser: {user}\nassistant: ");
                }
                self.first = Some((start, cost, prefilled, reused));
                self.steps.clear();
                self.token(out, token);
            }
            Event::Token { token, cost, .. } => {
                self.steps.push(cost);
                self.token(out, token);
            }
            Event::End {
                generated, context, ..
            } => {
                self.pending.clear();
                let _ = writeln!(out);
                let mut steps = self.steps.clone();
                steps.sort_unstable();
                let decode = steps.get(steps.len() / 2).copied().unwrap_or(0);
                let prefix = if self.document {
                    "document"
                } else {
                    "system prompt"
                };
                if let Some((start, cost, prefilled, reused)) = self.first.take() {
                    let how = match start {
                        Start::Restored => format!(
                            "{prefix} restored ({} to restore) + {prefilled} tokens prefilled",
                            mi(self.restore)
                        ),
                        Start::Reused => format!(
                            "{reused} tokens of the {prefix} reused from the prefix index + {prefilled} prefilled"
                        ),
                        _ => format!("conversation kept, {prefilled} tokens prefilled"),
                    };
                    let first = if start == Start::Restored {
                        cost + self.restore
                    } else {
                        cost
                    };
                    let _ = writeln!(
                        out,
                        "  [first token: {} instructions ({how}); {generated} tokens, decode {} instructions/token (median); context {context} tokens]",
                        mi(first),
                        mi(decode)
                    );
                }
            }
            Event::Pages { group, pages, .. } => {
                let what = match (self.document, group) {
                    (true, 0) => "the 15 sliding-window layers (window 512)",
                    (true, _) => "the 3 global layers",
                    _ => "",
                };
                let _ = writeln!(
                    out,
                    "  [pages, group {group} {what}: {} held, {} released by the window; pool: {} cached for prefix reuse, {} free]",
                    pages.held, pages.released, pages.cached, pages.free
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_inverts_gpt2s_alphabet() {
        let m = byte_map();
        assert_eq!(m.len(), 256);
        // "Ġ" (U+0120) is the space, "Ċ" (U+010A) the newline, as in the GGUF's tokens.
        assert_eq!(m[&'\u{120}'], b' ');
        assert_eq!(m[&'\u{10A}'], b'\n');
        assert_eq!(m[&'a'], b'a');
        // The last shifted byte: the soft hyphen, after 0x00–0x20 and 0x7F–0xA0.
        assert_eq!(m[&'\u{143}'], 0xAD);
    }

    #[test]
    fn sentencepiece_pieces_decode() {
        assert_eq!(piece_bytes("\u{2581}the"), b" the");
        assert_eq!(piece_bytes("<0x0A>"), b"\n");
        assert_eq!(piece_bytes("<0xE2>"), [0xE2]);
        assert_eq!(piece_bytes("<eos>"), b"<eos>");
        assert_eq!(piece_bytes("<0x>"), b"<0x>");
    }

    #[test]
    fn firmware_event_lines_parse() {
        // The lines `boards/qemu-an547/src/main.rs` prints.
        assert_eq!(
            event("restored 250 tokens instructions 59558500"),
            Some(Event::Restored {
                tokens: 250,
                cost: 59_558_500
            })
        );
        assert_eq!(
            event(
                "first restored turn 0 prefilled 11 reused 0 token 504 crc32 0a1b2c3d instructions 64"
            ),
            Some(Event::First {
                turn: 0,
                start: Start::Restored,
                prefilled: 11,
                reused: 0,
                token: 504,
                crc: 0x0a1b_2c3d,
                cost: 64
            })
        );
        assert_eq!(
            event("token turn 2 id 30 crc32 ffffffff instructions 7"),
            Some(Event::Token {
                turn: 2,
                token: 30,
                crc: u32::MAX,
                cost: 7
            })
        );
        assert_eq!(
            event("end turn 1 generated 20 context 318"),
            Some(Event::End {
                turn: 1,
                generated: 20,
                context: 318
            })
        );
        assert_eq!(
            event("pages turn 0 group 1 held 34 released 0 cached 0 free 266"),
            Some(Event::Pages {
                turn: 0,
                group: 1,
                pages: edgekv_llm::chat::GroupPages {
                    held: 34,
                    released: 0,
                    cached: 0,
                    free: 266
                }
            })
        );
        for other in [
            "kv q8_0: 12240 B/token",
            "first warm turn 0",
            "token turn x id 1",
            "",
        ] {
            assert_eq!(event(other), None, "{other:?}");
        }
    }
}
