//! `edgekv plan`: how many tokens of KV fit in an arena, per page format, answered by the core's
//! const planner (`CacheConfig::plan` / `plan_split`) exactly as a board would size its statics.

use std::fmt::Write as _;

use edgekv::{
    CacheConfig, ElementFormat, FreeList, GroupWindow, LayerGroup, Layers, PageAllocator, Shape,
};

/// One named element format for `head_dim` (fp8 tiles of 32 over the whole head row).
fn format(name: &str, head_dim: u16) -> Option<ElementFormat> {
    Some(match name {
        "f32" => ElementFormat::F32,
        "f16" => ElementFormat::F16,
        "bf16" => ElementFormat::Bf16,
        "q8_0" => ElementFormat::Q8_0,
        "int8-head" => ElementFormat::Int8 { group: head_dim },
        "fp8" => ElementFormat::Fp8Tile {
            dv: head_dim,
            tile: 32,
            bf16: false,
        },
        "q4_0" => ElementFormat::Q4_0,
        "q4_1" => ElementFormat::Q4_1,
        _ => return None,
    })
}

/// Format names `plan` knows.
pub const FORMAT_NAMES: [&str; 8] = [
    "f32",
    "f16",
    "bf16",
    "q8_0",
    "int8-head",
    "fp8",
    "q4_0",
    "q4_1",
];

/// Parses `k` or `k/v` (each one of [`FORMAT_NAMES`]).
pub fn parse_pair(spec: &str, head_dim: u16) -> Result<(ElementFormat, ElementFormat), String> {
    let (k, v) = spec.split_once('/').unwrap_or((spec, spec));
    let one = |n: &str| {
        format(n, head_dim).ok_or_else(|| {
            format!(
                "unknown format {n:?}; formats: {} (K/V as k/v, e.g. q8_0/f16)",
                FORMAT_NAMES.join(", ")
            )
        })
    };
    Ok((one(k)?, one(v)?))
}

/// Parses a byte size: a number with an optional `K`/`KiB`, `M`/`MiB` or `G`/`GiB` suffix
/// (binary multiples), e.g. `2MiB`, `512K`, `1048576`.
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: usize = num
        .parse()
        .map_err(|_| format!("not a byte size: {s:?} (e.g. 2MiB, 512K, 1048576)"))?;
    let mult: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" | "kb" => 1 << 10,
        "m" | "mib" | "mb" => 1 << 20,
        "g" | "gib" | "gb" => 1 << 30,
        _ => return Err(format!("unknown size unit in {s:?} (K, M, G)")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("byte size too large: {s:?}"))
}

/// What to plan.
#[derive(Clone, Debug)]
pub struct Request {
    /// The model's KV shape.
    pub shape: Shape,
    /// Bytes of the data arena (or of the one buffer with `split`).
    pub arena_bytes: usize,
    /// One buffer holds metadata and data (`plan_split`) instead of two arenas.
    pub split: bool,
    /// Tokens per page.
    pub page_tokens: u16,
    /// Sequence slots.
    pub sequences: u16,
    /// Format pairs to tabulate, by name.
    pub formats: Vec<String>,
    /// Sliding window of the windowed layers, if the model has them.
    pub window: Option<u32>,
    /// Every this-many-th layer is global (layers `n − 1`, `2n − 1`, …), the others windowed;
    /// `None` with a window: every layer windowed.
    pub global_every: Option<u16>,
}

/// The configuration of `req` with pages of `k` / `v`: one group, or with a window the windowed
/// layers in the base group and the global ones listed.
fn config(req: &Request, k: ElementFormat, v: ElementFormat) -> CacheConfig {
    let mut config = CacheConfig::new(req.shape)
        .with_formats(k, v)
        .with_page_tokens(req.page_tokens)
        .with_sequences(req.sequences, u32::MAX / 2);
    if let Some(w) = req.window {
        config = config.with_window(GroupWindow::new(w, 0));
        if let Some(n) = req.global_every {
            let layers = Layers::Every {
                period: n,
                first: n.saturating_sub(1),
            };
            config = config.with_group(LayerGroup::new(layers).with_formats(k, v));
        }
    }
    config
}

/// The table of a windowed request: tokens of context with the window against all-global.
fn window_table(req: &Request, out: &mut String) -> Result<(), String> {
    if req.split {
        return Err("--split is not planned with a sliding window yet".into());
    }
    let _ = writeln!(
        out,
        "sliding window {} on {}; one sequence's context (tokens) with windowed layers releasing pages, and all global",
        req.window.unwrap_or(0),
        match req.global_every {
            Some(n) => format!("every layer but every {n}th"),
            None => "every layer".into(),
        }
    );
    let _ = writeln!(
        out,
        "{:<12} {:>11} {:>14} {:>14} {:>7} {:>11}",
        "format K/V", "B/token", "windowed", "all global", "ratio", "data B"
    );
    let bits = <FreeList as PageAllocator>::META_BITS_PER_PAGE;
    for name in &req.formats {
        let (k, v) = parse_pair(name, req.shape.head_dim)?;
        let config = config(req, k, v);
        let all = config.without_windows();
        let page_bytes: usize = (0..all.group_count())
            .map(|g| all.group_geometry(g).map(|geo| geo.page_bytes))
            .sum::<Result<usize, _>>()
            .map_err(|e| format!("{name}: {e}"))?;
        let per_token = page_bytes as f64 / req.page_tokens as f64;
        match (
            config.plan_groups(req.arena_bytes, bits),
            all.plan_groups(req.arena_bytes, bits),
        ) {
            (Ok(w), Ok(g)) => {
                let _ = writeln!(
                    out,
                    "{:<12} {:>11.0} {:>14} {:>14} {:>7.2} {:>11}",
                    name,
                    per_token,
                    w.context_tokens,
                    g.context_tokens,
                    w.context_tokens as f64 / g.context_tokens as f64,
                    w.data_bytes
                );
            }
            (Err(edgekv::ConfigError::ArenaTooSmall), _)
            | (_, Err(edgekv::ConfigError::ArenaTooSmall)) => {
                let _ = writeln!(
                    out,
                    "{name:<12} {per_token:>11.0} {:>14} {:>14} {:>7} {:>11}  (a page of every group does not fit)",
                    0, 0, "-", "-"
                );
            }
            (Err(e), _) | (_, Err(e)) => return Err(format!("{name}: {e}")),
        }
    }
    Ok(())
}

/// The table `edgekv plan` prints, or the reason it cannot.
pub fn table(req: &Request) -> Result<String, String> {
    let mut out = String::new();
    let s = req.shape;
    let _ = writeln!(
        out,
        "{} layers x {} KV heads x head_dim {}; {} arena of {} B ({:.2} MiB); pages of {} tokens; {} sequences; free-list allocator",
        s.layers,
        s.kv_heads,
        s.head_dim,
        if req.split {
            "one (metadata + data)"
        } else {
            "data"
        },
        req.arena_bytes,
        req.arena_bytes as f64 / (1 << 20) as f64,
        req.page_tokens,
        req.sequences,
    );
    if req.window.is_some() {
        window_table(req, &mut out)?;
        return Ok(out);
    }
    let _ = writeln!(
        out,
        "{:<12} {:>11} {:>7} {:>14} {:>11} {:>11}",
        "format K/V", "B/token", "pages", "tokens that fit", "data B", "metadata B"
    );
    for name in &req.formats {
        let (k, v) = parse_pair(name, s.head_dim)?;
        let config = config(req, k, v);
        let geo = config
            .geometry()
            .map_err(|e| format!("{name}: this shape cannot use it: {e}"))?;
        let bits = <FreeList as PageAllocator>::META_BITS_PER_PAGE;
        let plan = if req.split {
            config.plan_split(req.arena_bytes, bits)
        } else {
            config.plan(req.arena_bytes, bits)
        };
        let per_token = geo.page_bytes as f64 / req.page_tokens as f64;
        match plan {
            Ok(p) => {
                let _ = writeln!(
                    out,
                    "{:<12} {:>11.0} {:>7} {:>14} {:>11} {:>11}",
                    name,
                    per_token,
                    p.num_pages,
                    p.token_capacity(),
                    p.data_bytes,
                    p.meta.total
                );
            }
            Err(edgekv::ConfigError::ArenaTooSmall) => {
                let _ = writeln!(
                    out,
                    "{name:<12} {per_token:>11.0} {:>7} {:>14} {:>11} {:>11}  (one page needs {} B)",
                    0, 0, "-", "-", geo.page_bytes
                );
            }
            Err(e) => return Err(format!("{name}: {e}")),
        }
    }
    Ok(out)
}

/// The KV shape of a GGUF model file, from its metadata (any architecture that states
/// `ARCH.block_count`, `ARCH.attention.head_count_kv` or `ARCH.attention.head_count`, and
/// `ARCH.attention.key_length` or `ARCH.embedding_length / head_count`), parsed with
/// `edgekv-llm`'s in-place GGUF reader.
pub fn gguf_shape(bytes: &[u8]) -> Result<Shape, String> {
    let g = edgekv_llm::gguf::Gguf::parse(bytes).map_err(|e| format!("not a usable GGUF: {e}"))?;
    let arch = g
        .get("general.architecture")
        .and_then(|v| v.as_bytes())
        .and_then(|b| std::str::from_utf8(b).ok())
        .ok_or("GGUF metadata has no general.architecture string")?
        .to_string();
    let uint =
        |key: &str| -> Option<u64> { g.get(&format!("{arch}.{key}")).and_then(|v| v.as_u64()) };
    let layers = uint("block_count").ok_or(format!("GGUF metadata has no {arch}.block_count"))?;
    let heads = uint("attention.head_count")
        .ok_or(format!("GGUF metadata has no {arch}.attention.head_count"))?;
    let kv_heads = uint("attention.head_count_kv").unwrap_or(heads);
    let head_dim = match uint("attention.key_length") {
        Some(d) => d,
        None => {
            let embed = uint("embedding_length")
                .ok_or(format!("GGUF metadata has no {arch}.embedding_length"))?;
            if heads == 0 || embed % heads != 0 {
                return Err(format!(
                    "{arch}: embedding {embed} does not split into {heads} heads"
                ));
            }
            embed / heads
        }
    };
    let narrow = |what: &str, x: u64| {
        u16::try_from(x)
            .map_err(|_| format!("{arch}: {what} {x} is past what edgekv pages hold (u16)"))
    };
    Ok(Shape {
        layers: narrow("block_count", layers)?,
        kv_heads: narrow("head_count_kv", kv_heads)?,
        head_dim: narrow("key_length", head_dim)?,
    })
}

/// The sliding window of a GGUF model (`ARCH.attention.sliding_window`) and its layer pattern:
/// `ARCH.attention.sliding_window_pattern` when the file states it as a number, else the
/// architecture's (llama.cpp's: `gemma3` has every 6th layer global). `(None, None)` without a
/// window; an error for a window whose pattern is unknown.
pub fn gguf_window(bytes: &[u8]) -> Result<(Option<u32>, Option<u16>), String> {
    let g = edgekv_llm::gguf::Gguf::parse(bytes).map_err(|e| format!("not a usable GGUF: {e}"))?;
    let arch = g
        .get("general.architecture")
        .and_then(|v| v.as_bytes())
        .and_then(|b| std::str::from_utf8(b).ok())
        .ok_or("GGUF metadata has no general.architecture string")?
        .to_string();
    let uint =
        |key: &str| -> Option<u64> { g.get(&format!("{arch}.{key}")).and_then(|v| v.as_u64()) };
    let Some(window) = uint("attention.sliding_window") else {
        return Ok((None, None));
    };
    let window = u32::try_from(window)
        .ok()
        .filter(|&w| w > 0)
        .ok_or(format!(
            "{arch}: sliding_window {window} is not a window edgekv takes"
        ))?;
    let every = match (uint("attention.sliding_window_pattern"), arch.as_str()) {
        (Some(n), _) => u16::try_from(n).ok().filter(|&n| n > 0).ok_or(format!(
            "{arch}: sliding_window_pattern {n} is not a period"
        ))?,
        (None, "gemma3") => 6,
        (None, _) => {
            return Err(format!(
                "{arch}: a sliding window of {window} without a known layer pattern; give --global-every"
            ));
        }
    };
    Ok((Some(window), Some(every)))
}
