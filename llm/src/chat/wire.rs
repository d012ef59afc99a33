//! A [`Script`] as little-endian `u32` words, so a host can hand one to a board (QEMU's
//! generic loader puts the words in memory; a real board would get them over a link):
//!
//! ```text
//! word 0   MAGIC ("CHAT")        word 1   VERSION
//! word 2   flags (bit 0: cold)   word 3   system ids S
//! word 4   stop ids P            word 5   turns T
//! T × [prompt ids, max_new, flags (bit 0: new conversation)]
//! S system ids, P stop ids, then each turn's prompt ids in order
//! ```

use super::{Script, Turn};
use crate::error::{Error, Result};

/// The first word.
pub const MAGIC: u32 = u32::from_le_bytes(*b"CHAT");
/// The layout version.
pub const VERSION: u32 = 1;
const HEAD: usize = 6;

/// Words [`encode`] writes for `script`.
pub fn encoded_len(script: &Script<'_>) -> usize {
    HEAD + 3 * script.turns.len()
        + script.system.len()
        + script.stop.len()
        + script.turns.iter().map(|t| t.prompt.len()).sum::<usize>()
}

/// Writes `script` into `out` and returns the words written.
///
/// # Errors
///
/// [`Error::BufferTooSmall`] when `out` is shorter than [`encoded_len`];
/// [`Error::BadScript`] when a count does not fit a word.
pub fn encode(script: &Script<'_>, out: &mut [u32]) -> Result<usize> {
    let n = encoded_len(script);
    let out = out
        .get_mut(..n)
        .ok_or(Error::BufferTooSmall { needed: n })?;
    let word = |v: usize| u32::try_from(v).map_err(|_| Error::BadScript("count too large"));
    let head = [
        MAGIC,
        VERSION,
        u32::from(script.cold),
        word(script.system.len())?,
        word(script.stop.len())?,
        word(script.turns.len())?,
    ];
    out[..HEAD].copy_from_slice(&head);
    let mut at = HEAD;
    for t in script.turns {
        out[at] = word(t.prompt.len())?;
        out[at + 1] = t.max_new;
        out[at + 2] = u32::from(t.new_conversation);
        at += 3;
    }
    for ids in [script.system, script.stop]
        .into_iter()
        .chain(script.turns.iter().map(|t| t.prompt))
    {
        out[at..at + ids.len()].copy_from_slice(ids);
        at += ids.len();
    }
    Ok(at)
}

/// Reads a script from `words`, its turns into `turns` (borrowing the ids in place).
///
/// # Errors
///
/// [`Error::BadScript`] for a wrong magic or version, unknown flag bits, or counts that
/// overrun `words`; [`Error::BufferTooSmall`] when `turns` holds fewer than the script's turns.
pub fn decode<'w>(words: &'w [u32], turns: &'w mut [Turn<'w>]) -> Result<Script<'w>> {
    let head = words.get(..HEAD).ok_or(Error::BadScript("truncated"))?;
    if head[0] != MAGIC {
        return Err(Error::BadScript("magic"));
    }
    if head[1] != VERSION {
        return Err(Error::BadScript("version"));
    }
    if head[2] > 1 {
        return Err(Error::BadScript("flags"));
    }
    let (s, p, t) = (head[3] as usize, head[4] as usize, head[5] as usize);
    if turns.len() < t {
        return Err(Error::BufferTooSmall { needed: t });
    }
    let table_end = t
        .checked_mul(3)
        .and_then(|n| n.checked_add(HEAD))
        .ok_or(Error::BadScript("turn count"))?;
    let table = words
        .get(HEAD..table_end)
        .ok_or(Error::BadScript("truncated"))?;
    let mut at = table_end;
    let mut take = |n: usize| -> Result<&'w [u32]> {
        let end = at.checked_add(n).ok_or(Error::BadScript("length"))?;
        let ids = words.get(at..end).ok_or(Error::BadScript("truncated"))?;
        at = end;
        Ok(ids)
    };
    let system = take(s)?;
    let stop = take(p)?;
    for (turn, row) in turns.iter_mut().zip(table.chunks_exact(3)) {
        if row[2] > 1 {
            return Err(Error::BadScript("turn flags"));
        }
        *turn = Turn {
            prompt: take(row[0] as usize)?,
            max_new: row[1],
            new_conversation: row[2] == 1,
        };
    }
    if at != words.len() {
        return Err(Error::BadScript("trailing words"));
    }
    let turns: &'w [Turn<'w>] = turns;
    Ok(Script {
        system,
        cold: head[2] == 1,
        turns: &turns[..t],
        stop,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYSTEM: [u32; 5] = [1, 9690, 198, 7, 8];
    const A: [u32; 3] = [4182, 2, 198];
    const B: [u32; 4] = [2, 198, 1, 4093];

    fn script<'t>(turns: &'t [Turn<'t>]) -> Script<'t> {
        Script {
            system: &SYSTEM,
            cold: true,
            turns,
            stop: &[2],
        }
    }

    fn encoded() -> Vec<u32> {
        let turns = [
            Turn {
                prompt: &A,
                max_new: 20,
                new_conversation: false,
            },
            Turn {
                prompt: &B,
                max_new: 3,
                new_conversation: true,
            },
        ];
        let s = script(&turns);
        let mut w = vec![0; encoded_len(&s)];
        assert_eq!(encode(&s, &mut w).unwrap(), w.len());
        w
    }

    #[test]
    fn round_trip() {
        let w = encoded();
        let mut turns = [Turn::default(); 4];
        let s = decode(&w, &mut turns).unwrap();
        assert_eq!(s.system, SYSTEM);
        assert!(s.cold);
        assert_eq!(s.stop, [2]);
        assert_eq!(s.turns.len(), 2);
        assert_eq!(
            s.turns[1],
            Turn {
                prompt: &B,
                max_new: 3,
                new_conversation: true
            }
        );
        assert_eq!(s.turns[0].prompt, A);
    }

    #[test]
    fn encode_refuses_a_short_buffer() {
        let turns = [Turn {
            prompt: &A,
            max_new: 1,
            new_conversation: false,
        }];
        let s = script(&turns);
        let mut w = vec![0; encoded_len(&s) - 1];
        assert_eq!(
            encode(&s, &mut w),
            Err(Error::BufferTooSmall {
                needed: encoded_len(&s)
            })
        );
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        let w = encoded();
        for n in 0..w.len() {
            let mut turns = [Turn::default(); 4];
            assert!(
                matches!(decode(&w[..n], &mut turns), Err(Error::BadScript(_))),
                "{n} words"
            );
        }
        let mut long = w.clone();
        long.push(0);
        let mut turns = [Turn::default(); 4];
        assert_eq!(
            decode(&long, &mut turns),
            Err(Error::BadScript("trailing words"))
        );
    }

    #[test]
    fn bad_fields_are_refused() {
        let w = encoded();
        let cases: [(usize, u32, Error); 7] = [
            (0, 0, Error::BadScript("magic")),
            (1, 2, Error::BadScript("version")),
            (2, 2, Error::BadScript("flags")),
            (3, u32::MAX, Error::BadScript("truncated")),
            (5, 9, Error::BufferTooSmall { needed: 9 }),
            (6, u32::MAX, Error::BadScript("truncated")),
            (8, 2, Error::BadScript("turn flags")),
        ];
        for (at, value, want) in cases {
            let mut bad = w.clone();
            bad[at] = value;
            let mut turns = [Turn::default(); 4];
            assert_eq!(decode(&bad, &mut turns), Err(want), "word {at} = {value}");
        }
        // A turn count whose table overflows.
        let mut bad = w.clone();
        bad[5] = u32::MAX;
        let mut turns = vec![Turn::default(); 1];
        assert!(decode(&bad, &mut turns).is_err());
    }
}
