//! The scripted chat on the real model (skipped with a notice when the model file is missing):
//! the restored system prompt gives the cold start's first-token logits bit for bit, a new
//! conversation over the reused prefix gives a cold prefill's, and bad scripts, images and
//! buffers are refused with the cache left without a sequence.

mod common;

use common::{Arenas, HELLO, cache_config, model, scratch};
use edgekv::ElementFormat;
use edgekv::snapshot::{RamFlash, SliceFlash};
use edgekv_llm::chat::{self, Buffers, Event, Script, Start, Turn};
use edgekv_llm::{Engine, Error, Llama, Logits};

/// A 40-token "system prompt" (two full pages and a half).
fn system() -> Vec<u32> {
    HELLO.iter().copied().cycle().take(40).collect()
}

const TURN_A: [u32; 6] = [4182, 4463, 330, 3498, 47, 2];
const TURN_B: [u32; 5] = [2, 198, 1, 4093, 198];

fn image(model: &Llama<'_>, system: &[u32]) -> Vec<u8> {
    let mut arenas = Arenas::new(cache_config(model, ElementFormat::Q8_0, 16), 8);
    let mut cache = arenas.cache();
    let mut s = scratch(model, 16);
    let mut engine = Engine::new(model, &mut s, 16).unwrap();
    let mut logits = vec![0f32; model.config().vocab];
    let mut mem = vec![0xffu8; 1 << 20];
    let mut flash = RamFlash::<16, 4096>::new(&mut mem);
    let h = chat::write_system_image(&mut engine, &mut cache, system, &mut logits, &mut flash, 0)
        .unwrap();
    assert_eq!(
        cache.pool().available(),
        cache.pool().num_pages(),
        "sequence freed"
    );
    mem.truncate(h.image as usize);
    mem
}

/// Runs `script` over a fresh cache; returns the events or the error, with the pages sequences
/// still hold after it.
fn run(model: &Llama<'_>, script: &Script<'_>, image: &[u8]) -> (Result<Vec<Event>, Error>, usize) {
    let mut arenas = Arenas::new(cache_config(model, ElementFormat::Q8_0, 16), 16);
    let mut cache = arenas.cache();
    let mut s = scratch(model, 16);
    let mut engine = Engine::new(model, &mut s, 16).unwrap();
    let mut logits = vec![0f32; model.config().vocab];
    let mut prompt = vec![0u32; 64];
    let mut events = Vec::new();
    let mut t = 0u64;
    let r = chat::run(
        &mut engine,
        &mut cache,
        script,
        &mut SliceFlash(image),
        Buffers {
            logits: &mut logits,
            prompt: &mut prompt,
        },
        &mut || {
            t += 1;
            t
        },
        &mut |e| events.push(e),
    );
    (
        r.map(|()| events),
        cache.pool().num_pages() - cache.pool().available(),
    )
}

#[test]
fn restored_continued_and_reused_starts_equal_cold_prefills() {
    let Some(model) = model() else { return };
    let system = system();
    let image = image(&model, &system);
    let turns = [
        Turn {
            prompt: &TURN_A,
            max_new: 3,
            new_conversation: false,
        },
        Turn {
            prompt: &TURN_B,
            max_new: 2,
            new_conversation: false,
        },
        Turn {
            prompt: &TURN_A,
            max_new: 2,
            new_conversation: true,
        },
    ];
    let script = Script {
        system: &system,
        cold: true,
        turns: &turns,
        stop: &[2],
    };
    let (events, live) = run(&model, &script, &image);
    let events = events.unwrap();
    assert!(live > 0, "the last conversation stays");
    let firsts: Vec<(Start, u32, u32, u32)> = events
        .iter()
        .filter_map(|e| match *e {
            Event::First {
                start,
                reused,
                crc,
                token,
                ..
            } => Some((start, reused, crc, token)),
            _ => None,
        })
        .collect();
    let starts: Vec<Start> = firsts.iter().map(|f| f.0).collect();
    assert_eq!(
        starts,
        [
            Start::Cold,
            Start::Restored,
            Start::Continued,
            Start::Reused
        ]
    );
    assert_eq!(firsts[0].2, firsts[1].2, "restored = cold, bit for bit");
    // The reused start equals the cold start's logits (same prompt), and reused 2 whole pages.
    assert_eq!(firsts[3].1, 32);
    assert_eq!(firsts[3].2, firsts[0].2, "reused = cold, bit for bit");
    // Every cost came from the clock (each step read it twice).
    assert!(events.iter().all(|e| match *e {
        Event::First { cost, .. } | Event::Token { cost, .. } | Event::Restored { cost, .. } =>
            cost >= 1,
        Event::End { .. } | Event::Pages { .. } => true,
    }));

    // The continued turn equals a cold prefill of everything before it.
    let mut history = system.clone();
    history.extend_from_slice(&TURN_A);
    let tokens: Vec<u32> = events
        .iter()
        .filter_map(|e| match *e {
            Event::First {
                turn: 0,
                start: Start::Restored,
                token,
                ..
            }
            | Event::Token { turn: 0, token, .. } => Some(token),
            _ => None,
        })
        .collect();
    // All generated tokens but the last were appended; the last is prepended to turn B unless
    // it is the stop id.
    history.extend(tokens.iter().copied().filter(|&t| t != 2));
    history.extend_from_slice(&TURN_B);
    let mut arenas = Arenas::new(cache_config(&model, ElementFormat::Q8_0, 16), 16);
    let mut cache = arenas.cache();
    let mut s = scratch(&model, 16);
    let mut engine = Engine::new(&model, &mut s, 16).unwrap();
    let mut logits = vec![0f32; model.config().vocab];
    let seq = cache.create_sequence(edgekv::SeqMode::Paged).unwrap();
    engine
        .prefill(&mut cache, seq, &history, Logits::Last, &mut logits)
        .unwrap();
    assert_eq!(
        chat::logits_crc(&logits),
        firsts[2].2,
        "continued = cold, bit for bit"
    );
}

#[test]
fn bad_scripts_images_and_buffers_are_refused_without_a_sequence_left() {
    let Some(model) = model() else { return };
    let system = system();
    let image = image(&model, &system);
    let turn = [Turn {
        prompt: &TURN_A,
        max_new: 1,
        new_conversation: false,
    }];
    let ok = Script {
        system: &system,
        cold: false,
        turns: &turn,
        stop: &[2],
    };
    let (r, live) = run(&model, &ok, &image);
    assert!(r.is_ok());
    assert!(live > 0);

    // Another system prompt than the image's.
    let other: Vec<u32> = system.iter().map(|t| t + 1).collect();
    let (r, live) = run(
        &model,
        &Script {
            system: &other,
            ..ok
        },
        &image,
    );
    assert_eq!(r.unwrap_err(), Error::Mismatch("restored system prompt"));
    assert_eq!(live, 0);
    // An empty turn, an empty system prompt.
    let empty = [Turn {
        prompt: &[],
        ..turn[0]
    }];
    let (r, _) = run(
        &model,
        &Script {
            turns: &empty,
            ..ok
        },
        &image,
    );
    assert_eq!(r.unwrap_err(), Error::Empty);
    let (r, _) = run(&model, &Script { system: &[], ..ok }, &image);
    assert_eq!(r.unwrap_err(), Error::Empty);
    // A corrupt image: the restore's error, nothing left.
    let mut bad = image.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let (r, live) = run(&model, &ok, &bad);
    assert!(matches!(r.unwrap_err(), Error::Snapshot(_)));
    assert_eq!(live, 0);
    // A prompt buffer too small for a new conversation's prompt.
    let long: Vec<u32> = HELLO.iter().copied().cycle().take(40).collect();
    let new = [Turn {
        prompt: &long,
        max_new: 1,
        new_conversation: true,
    }];
    let (r, live) = run(&model, &Script { turns: &new, ..ok }, &image);
    assert_eq!(r.unwrap_err(), Error::BufferTooSmall { needed: 80 });
    assert_eq!(live, 0);
}
