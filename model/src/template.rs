//! Chat templates: a conversation's messages as the prompt text a model was tuned on, the same
//! text llama.cpp's built-in templates give (`llama_chat_apply_template`), so a conversation
//! rendered again with one more turn starts with the previous rendering and its KV is reused.

use edgekv_llm::Gguf;

use crate::{Error, Result};

/// Who speaks in a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Instructions before the conversation.
    System,
    /// The person chatting.
    User,
    /// The model.
    Assistant,
}

/// A message of a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'t> {
    /// Its speaker.
    pub role: Role,
    /// Its text.
    pub text: &'t str,
}

/// A chat template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatTemplate {
    /// ChatML (SmolLM2): `<|im_start|>role\n…<|im_end|>\n`, text as given.
    ChatMl,
    /// Gemma: `<start_of_turn>user\n…<end_of_turn>\n`, the assistant as `model`, texts trimmed,
    /// system text joined to the first user turn (Gemma has no system role).
    Gemma,
}

impl ChatTemplate {
    /// The template a GGUF's model was tuned on: read from its `tokenizer.chat_template`
    /// markers, else from its architecture (`gemma*`) or vocabulary (`<|im_start|>`).
    pub fn from_gguf(gguf: &Gguf<'_>) -> Result<Self> {
        let contains =
            |hay: &[u8], needle: &str| hay.windows(needle.len()).any(|w| w == needle.as_bytes());
        if let Some(t) = gguf
            .get("tokenizer.chat_template")
            .and_then(|v| v.as_bytes())
        {
            if contains(t, "<start_of_turn>") {
                return Ok(ChatTemplate::Gemma);
            }
            if contains(t, "<|im_start|>") {
                return Ok(ChatTemplate::ChatMl);
            }
        }
        let arch = gguf
            .get("general.architecture")
            .and_then(|v| v.as_bytes())
            .unwrap_or_default();
        if arch.starts_with(b"gemma") {
            return Ok(ChatTemplate::Gemma);
        }
        let chatml = gguf
            .get("tokenizer.ggml.tokens")
            .and_then(|v| v.as_array())
            .is_some_and(|a| a.iter().any(|t| t.as_bytes() == Some(b"<|im_start|>")));
        if chatml {
            return Ok(ChatTemplate::ChatMl);
        }
        Err(Error::Model(
            "no known chat template (neither ChatML's nor Gemma's markers)".into(),
        ))
    }

    /// The prompt text of `messages`, then the opening of the assistant's turn when
    /// `generation` is set.
    pub fn render(&self, messages: &[Message<'_>], generation: bool) -> String {
        let mut out = String::new();
        match self {
            ChatTemplate::ChatMl => {
                for m in messages {
                    let role = match m.role {
                        Role::System => "system",
                        Role::User => "user",
                        Role::Assistant => "assistant",
                    };
                    out += &format!("<|im_start|>{role}\n{}<|im_end|>\n", m.text);
                }
                if generation {
                    out += "<|im_start|>assistant\n";
                }
            }
            ChatTemplate::Gemma => {
                let mut system = String::new();
                for m in messages {
                    let role = match m.role {
                        Role::System => {
                            system += m.text.trim();
                            continue;
                        }
                        Role::User => "user",
                        Role::Assistant => "model",
                    };
                    out += &format!("<start_of_turn>{role}\n");
                    if m.role == Role::User && !system.is_empty() {
                        out += &system;
                        out += "\n\n";
                        system.clear();
                    }
                    out += m.text.trim();
                    out += "<end_of_turn>\n";
                }
                if generation {
                    out += "<start_of_turn>model\n";
                }
            }
        }
        out
    }

    /// The control token that ends a turn (generation stops there).
    pub fn end_of_turn(&self) -> &'static str {
        match self {
            ChatTemplate::ChatMl => "<|im_end|>",
            ChatTemplate::Gemma => "<end_of_turn>",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conversation() -> [Message<'static>; 4] {
        [
            Message {
                role: Role::System,
                text: "You are terse. ",
            },
            Message {
                role: Role::User,
                text: " Is bed A dry?",
            },
            Message {
                role: Role::Assistant,
                text: "Yes.",
            },
            Message {
                role: Role::User,
                text: "And bed B?",
            },
        ]
    }

    /// llama.cpp's `llama_chat_apply_template` ("gemma", "chatml") gave these strings.
    #[test]
    fn renderings_equal_llama_cpps() {
        assert_eq!(
            ChatTemplate::Gemma.render(&conversation(), true),
            "<start_of_turn>user\nYou are terse.\n\nIs bed A dry?<end_of_turn>\n<start_of_turn>model\nYes.<end_of_turn>\n<start_of_turn>user\nAnd bed B?<end_of_turn>\n<start_of_turn>model\n"
        );
        assert_eq!(
            ChatTemplate::ChatMl.render(&conversation(), true),
            "<|im_start|>system\nYou are terse. <|im_end|>\n<|im_start|>user\n Is bed A dry?<|im_end|>\n<|im_start|>assistant\nYes.<|im_end|>\n<|im_start|>user\nAnd bed B?<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn a_longer_conversation_extends_the_shorter_ones_text() {
        for t in [ChatTemplate::Gemma, ChatTemplate::ChatMl] {
            let c = conversation();
            let full = t.render(&c, true);
            for n in 1..c.len() {
                assert!(full.starts_with(&t.render(&c[..n], false)), "{t:?} {n}");
            }
        }
    }
}
