//! The `edgekv` command line: quantize `[rows, dim]` .npy arrays with the cache's kernels and
//! back, so NPU pipelines can be checked against edgekv with numpy.
//!
//! ```text
//! edgekv quantize   --format q8_0|int8-head|fp8-tile|q4_0|q4_1 [--dv N] [--tile N] [--bf16] IN.npy OUT_PREFIX
//! edgekv dequantize --format q8_0|int8-head|fp8-tile|q4_0|q4_1 [--bf16] IN_PREFIX OUT.npy
//! edgekv snapshot   OUT.ekvs                   # the parity system prompt's KV image
//! edgekv inspect    [--fingerprint HEX] IMAGE  # verify an image (CRC, sizes) and describe it
//! edgekv plan       --gguf MODEL | --layers N --kv-heads N --head-dim N
//!                   --arena SIZE [--formats F,..] [--page-tokens P] [--sequences N] [--split]
//!                   [--window W [--global-every N]]
//!                                              # how many tokens fit, per page format
//! ```
//!
//! Input: float32 or float16 `[rows, dim]`, or bf16 as uint16 bit patterns with `--bf16`.
//! Outputs of `quantize`: `OUT_PREFIX.q.npy` (int8 codes; uint8 E4M3 codes `[rows, dv]` for
//! fp8), `OUT_PREFIX.scales.npy` (float16 `[rows, dim / group]`; float32 `[rows, dv / tile]` for
//! fp8) and, for fp8, `OUT_PREFIX.rows.npy` (uint8 `[rows, row_bytes]`, the page row bytes); for
//! q4_0 / q4_1 only `OUT_PREFIX.blocks.npy` (uint8 `[rows, dim / 32, block bytes]`, ggml's blocks).
//! `dequantize` reads them back (fp8 from `.rows.npy`) and writes float32 `[rows, dim]`.
//! Every output is computed before any file is written, then written to a temporary name and
//! renamed, so a failure leaves no partial output.

use std::fs;
use std::io::Cursor;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand, ValueEnum};
use edgekv::quant::{self, Q4_BLOCK, Q4Kind};
use half::{bf16, f16};
use npyz::WriterBuilder;

/// Command-line arguments.
#[derive(Parser, Debug)]
#[command(
    name = "edgekv",
    version,
    about = "Quantize and dequantize KV rows like edgekv's pages; write and check KV snapshot images"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Quantize a [rows, dim] float array.
    Quantize {
        #[command(flatten)]
        fmt: FormatArgs,
        /// Input .npy (float32, float16, or uint16 bf16 bits with --bf16).
        input: PathBuf,
        /// Output prefix: writes PREFIX.q.npy, PREFIX.scales.npy (and PREFIX.rows.npy for fp8).
        out_prefix: String,
    },
    /// Dequantize files written by `quantize` into a float32 [rows, dim] array.
    Dequantize {
        #[command(flatten)]
        fmt: FormatArgs,
        /// Prefix the quantized files were written with.
        in_prefix: String,
        /// Output .npy (float32).
        output: PathBuf,
    },
    /// Write the parity system prompt's KV snapshot image (what the QEMU firmware restores).
    Snapshot {
        /// Output image file.
        output: PathBuf,
    },
    /// How many tokens of KV fit in an arena: a table of page formats x (bytes per token, pages,
    /// tokens, data and metadata bytes), from the core's const planner.
    Plan(PlanArgs),
    /// Check a snapshot image completely (header, CRC, sizes) and describe it.
    Inspect {
        /// Image file.
        image: PathBuf,
        /// Fingerprint the image must carry (hex); default: accept the one it has.
        #[arg(long, value_parser = parse_hex)]
        fingerprint: Option<u64>,
    },
}

/// Arguments of `edgekv plan`.
#[derive(clap::Args, Debug)]
struct PlanArgs {
    /// A GGUF model file to read the KV shape from (block count, KV heads, head dim).
    #[arg(long, conflicts_with_all = ["layers", "kv_heads", "head_dim"])]
    gguf: Option<PathBuf>,
    /// Transformer layers (without --gguf).
    #[arg(long, required_unless_present = "gguf")]
    layers: Option<u16>,
    /// Key/value heads per layer (without --gguf).
    #[arg(long, required_unless_present = "gguf")]
    kv_heads: Option<u16>,
    /// Elements per head vector (without --gguf).
    #[arg(long, required_unless_present = "gguf")]
    head_dim: Option<u16>,
    /// Data arena size (e.g. 2MiB, 512K, 1048576); with --split, the one buffer's size.
    #[arg(long, value_parser = crate::plan::parse_bytes)]
    arena: usize,
    /// Formats to tabulate, comma-separated; K/V pairs as k/v (f32, f16, bf16, q8_0, int8-head,
    /// fp8, q4_0, q4_1).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "f32,f16,bf16,q8_0,fp8,q8_0/f16,q4_0,q4_1,q8_0/q4_0"
    )]
    formats: Vec<String>,
    /// Tokens per page (a power of two).
    #[arg(long, default_value_t = 16)]
    page_tokens: u16,
    /// Sequence slots.
    #[arg(long, default_value_t = 8)]
    sequences: u16,
    /// One buffer holds the metadata and data arenas (`CacheConfig::plan_split`).
    #[arg(long)]
    split: bool,
    /// Sliding window of the windowed layers (positions); with --gguf, overrides the file's
    /// `ARCH.attention.sliding_window`.
    #[arg(long)]
    window: Option<u32>,
    /// With a window: every this-many-th layer is global (layers n-1, 2n-1, ...), the others
    /// windowed; without it every layer is windowed (with --gguf: the file's pattern).
    #[arg(long, requires = "window")]
    global_every: Option<u16>,
}

fn parse_hex(s: &str) -> Result<u64, String> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(|e| e.to_string())
}

#[derive(clap::Args, Debug)]
struct FormatArgs {
    /// Quantized format.
    #[arg(long, value_enum)]
    format: Format,
    /// fp8-tile: quantized values per row (default: all of dim).
    #[arg(long)]
    dv: Option<usize>,
    /// fp8-tile: values per scale.
    #[arg(long, default_value_t = 128)]
    tile: usize,
    /// bf16 input (uint16 bit patterns); for fp8 the scale and tail are bf16 as in the reference.
    #[arg(long)]
    bf16: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// int8, one f16 scale per 32 values (ggml Q8_0).
    #[value(name = "q8_0")]
    Q8_0,
    /// int8, one f16 scale per row.
    #[value(name = "int8-head")]
    Int8Head,
    /// FP8 E4M3 tiles, f32 scales, raw tail (SGLang NSA layout).
    #[value(name = "fp8-tile")]
    Fp8Tile,
    /// ggml Q4_0 blocks of 32 (f16 scale, 4-bit codes): `OUT_PREFIX.blocks.npy`.
    #[value(name = "q4_0")]
    Q4_0,
    /// ggml Q4_1 blocks of 32 (f16 scale and minimum, 4-bit codes): `OUT_PREFIX.blocks.npy`.
    #[value(name = "q4_1")]
    Q4_1,
}

impl Format {
    /// The 4-bit block kind, for `q4_0` / `q4_1`.
    fn q4(self) -> Option<Q4Kind> {
        match self {
            Format::Q4_0 => Some(Q4Kind::Q4_0),
            Format::Q4_1 => Some(Q4Kind::Q4_1),
            _ => None,
        }
    }
}

/// An .npy file read into memory.
type Npy = npyz::NpyFile<Cursor<Vec<u8>>>;

/// Input rows, in the dtype they came in.
enum Rows {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
}

/// Runs the command line; `Err` carries the message for stderr.
pub fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Quantize {
            fmt,
            input,
            out_prefix,
        } => quantize(&fmt, &input, &out_prefix),
        Command::Dequantize {
            fmt,
            in_prefix,
            output,
        } => dequantize(&fmt, &in_prefix, &output),
        Command::Plan(a) => {
            let (mut window, mut global_every) = (a.window, a.global_every);
            let shape = match (&a.gguf, a.layers, a.kv_heads, a.head_dim) {
                (Some(path), ..) => {
                    let bytes = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
                    let at = |e| format!("{}: {e}", path.display());
                    if window.is_none() {
                        (window, global_every) = crate::plan::gguf_window(&bytes).map_err(at)?;
                    }
                    crate::plan::gguf_shape(&bytes).map_err(at)?
                }
                (None, Some(layers), Some(kv_heads), Some(head_dim)) => edgekv::Shape {
                    layers,
                    kv_heads,
                    head_dim,
                },
                _ => {
                    return Err(
                        "plan needs --gguf FILE or --layers, --kv-heads and --head-dim".into(),
                    );
                }
            };
            let req = crate::plan::Request {
                shape,
                arena_bytes: a.arena,
                split: a.split,
                page_tokens: a.page_tokens,
                sequences: a.sequences,
                formats: a.formats,
                window,
                global_every,
            };
            print!("{}", crate::plan::table(&req)?);
            Ok(())
        }
        Command::Snapshot { output } => {
            let h = crate::snapshot_tool::write_system_prompt(&output)?;
            println!(
                "{}: {} tokens, {} pages, {} B",
                output.display(),
                h.tokens,
                h.pages,
                h.image
            );
            Ok(())
        }
        Command::Inspect { image, fingerprint } => {
            println!("{}", crate::snapshot_tool::inspect(&image, fingerprint)?);
            Ok(())
        }
    }
}

/// A C-order .npy file and its shape.
fn read_npy_nd(path: &Path) -> Result<(Npy, Vec<usize>), String> {
    let bytes = fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let npy = npyz::NpyFile::new(Cursor::new(bytes))
        .map_err(|e| format!("{}: not a valid .npy file: {e}", path.display()))?;
    if npy.order() != npyz::Order::C {
        return Err(format!(
            "{}: Fortran-order arrays are not supported",
            path.display()
        ));
    }
    let shape = npy.shape().iter().map(|&d| d as usize).collect();
    Ok((npy, shape))
}

fn read_npy(path: &Path) -> Result<(Npy, [usize; 2]), String> {
    let (npy, shape) = read_npy_nd(path)?;
    let shape = match shape[..] {
        [r, c] => [r, c],
        _ => {
            return Err(format!(
                "{}: expected a 2-D [rows, dim] array, got shape {shape:?}",
                path.display()
            ));
        }
    };
    if shape[1] == 0 {
        return Err(format!("{}: dim is 0", path.display()));
    }
    Ok((npy, shape))
}

fn dtype_of(npy: &Npy) -> String {
    match npy.dtype() {
        npyz::DType::Plain(t) => t.to_string(),
        other => other.descr(),
    }
}

fn read_rows(path: &Path, bf16_bits: bool) -> Result<(Rows, [usize; 2]), String> {
    let (npy, shape) = read_npy(path)?;
    let dtype = dtype_of(&npy);
    let bad = |e: std::io::Error| format!("{}: {e}", path.display());
    let rows = match (dtype.as_str(), bf16_bits) {
        ("<f4", false) => Rows::F32(npy.into_vec().map_err(bad)?),
        ("<f2", false) => Rows::F16(npy.into_vec().map_err(bad)?),
        ("<u2", true) => Rows::Bf16(
            npy.into_vec::<u16>()
                .map_err(bad)?
                .into_iter()
                .map(bf16::from_bits)
                .collect(),
        ),
        ("<u2", false) => {
            return Err(format!(
                "{}: uint16 input is read as bf16 bits only with --bf16",
                path.display()
            ));
        }
        (d, true) => {
            return Err(format!(
                "{}: --bf16 needs uint16 bf16 bits, got dtype {d}",
                path.display()
            ));
        }
        (d, false) => {
            return Err(format!(
                "{}: unsupported dtype {d} (float32 or float16)",
                path.display()
            ));
        }
    };
    Ok((rows, shape))
}

/// An .npy file in memory.
fn npy_bytes<T: npyz::AutoSerialize + Clone>(
    shape: &[usize],
    data: &[T],
) -> Result<Vec<u8>, String> {
    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    let mut buf = Vec::new();
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&shape)
        .writer(&mut buf)
        .begin_nd()
        .map_err(|e| e.to_string())?;
    w.extend(data.iter().cloned()).map_err(|e| e.to_string())?;
    w.finish().map_err(|e| e.to_string())?;
    Ok(buf)
}

/// Writes every file or none: temporaries first, then renames.
fn write_all(files: &[(PathBuf, Vec<u8>)]) -> Result<(), String> {
    let tmp = |p: &Path| p.with_extension("npy.partial");
    let cleanup = || {
        files
            .iter()
            .for_each(|(p, _)| drop(fs::remove_file(tmp(p))))
    };
    for (path, bytes) in files {
        if let Err(e) = fs::write(tmp(path), bytes) {
            cleanup();
            return Err(format!("{}: {e}", path.display()));
        }
    }
    for (path, _) in files {
        if let Err(e) = fs::rename(tmp(path), path) {
            cleanup();
            return Err(format!("{}: {e}", path.display()));
        }
    }
    Ok(())
}

fn group_for(fmt: Format, dim: usize) -> usize {
    if fmt == Format::Q8_0 { 32 } else { dim }
}

fn quantize(args: &FormatArgs, input: &Path, prefix: &str) -> Result<(), String> {
    let (rows, [n, dim]) = read_rows(input, args.bf16)?;
    let msg = |e: edgekv::Error| format!("quantize: {e}");
    let files = match args.format {
        Format::Q8_0 | Format::Int8Head => {
            let g = group_for(args.format, dim);
            if dim % g != 0 {
                return Err(format!("dim {dim} is not divisible by the group size {g}"));
            }
            let mut codes = vec![0i8; n * dim];
            let mut scales = vec![f16::ZERO; n * dim / g];
            match &rows {
                Rows::F32(x) => quant::quantize_q8(x, g, &mut codes, &mut scales),
                Rows::F16(x) => quant::quantize_q8(x, g, &mut codes, &mut scales),
                Rows::Bf16(x) => quant::quantize_q8(x, g, &mut codes, &mut scales),
            }
            .map_err(msg)?;
            vec![
                (
                    PathBuf::from(format!("{prefix}.q.npy")),
                    npy_bytes(&[n, dim], &codes)?,
                ),
                (
                    PathBuf::from(format!("{prefix}.scales.npy")),
                    npy_bytes(&[n, dim / g], &scales)?,
                ),
            ]
        }
        Format::Fp8Tile => {
            let (dv, tile) = (args.dv.unwrap_or(dim), args.tile);
            let rb = quant::fp8_tile_row_bytes(dim, dv, tile, args.bf16).ok_or_else(|| {
                format!("fp8-tile needs 0 < dv ≤ dim and dv a multiple of tile (dim {dim}, dv {dv}, tile {tile})")
            })?;
            let mut out = vec![0u8; n * rb];
            for (r, row) in out.chunks_exact_mut(rb).enumerate() {
                let s = r * dim..(r + 1) * dim;
                match &rows {
                    Rows::F32(x) => quant::quantize_fp8_tile(&x[s], dv, tile, args.bf16, row),
                    Rows::F16(x) => quant::quantize_fp8_tile(&x[s], dv, tile, args.bf16, row),
                    Rows::Bf16(x) => quant::quantize_fp8_tile(&x[s], dv, tile, args.bf16, row),
                }
                .map_err(msg)?;
            }
            let codes: Vec<u8> = out
                .chunks_exact(rb)
                .flat_map(|r| r[..dv].iter().copied())
                .collect();
            let scales: Vec<f32> = out
                .chunks_exact(rb)
                .flat_map(|r| {
                    r[dv..dv + 4 * (dv / tile)]
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                })
                .collect();
            vec![
                (
                    PathBuf::from(format!("{prefix}.q.npy")),
                    npy_bytes(&[n, dv], &codes)?,
                ),
                (
                    PathBuf::from(format!("{prefix}.scales.npy")),
                    npy_bytes(&[n, dv / tile], &scales)?,
                ),
                (
                    PathBuf::from(format!("{prefix}.rows.npy")),
                    npy_bytes(&[n, rb], &out)?,
                ),
            ]
        }
        Format::Q4_0 | Format::Q4_1 => {
            let kind = args.format.q4().ok_or("not a 4-bit format")?;
            if dim % Q4_BLOCK != 0 {
                return Err(format!(
                    "dim {dim} is not divisible by the block size {Q4_BLOCK}"
                ));
            }
            // f16 and bf16 widen to f32 exactly.
            let x: Vec<f32> = match rows {
                Rows::F32(x) => x,
                Rows::F16(x) => x.iter().map(|v| v.to_f32()).collect(),
                Rows::Bf16(x) => x.iter().map(|v| v.to_f32()).collect(),
            };
            let bytes = kind.bytes_for(x.len()).ok_or("rows are not whole blocks")?;
            let mut blocks = vec![0u8; bytes];
            quant::quantize_q4(kind, &x, &mut blocks).map_err(msg)?;
            vec![(
                PathBuf::from(format!("{prefix}.blocks.npy")),
                npy_bytes(&[n, dim / Q4_BLOCK, kind.block_bytes()], &blocks)?,
            )]
        }
    };
    write_all(&files)
}

fn dequantize(args: &FormatArgs, prefix: &str, output: &Path) -> Result<(), String> {
    let msg = |e: edgekv::Error| format!("dequantize: {e}");
    let path = |ext: &str| PathBuf::from(format!("{prefix}.{ext}.npy"));
    let (n, dim, out) = match args.format {
        Format::Q8_0 | Format::Int8Head => {
            let (q, [n, dim]) = read_npy(&path("q"))?;
            let (s, [sn, groups]) = read_npy(&path("scales"))?;
            if dtype_of(&q) != "|i1" || dtype_of(&s) != "<f2" {
                return Err(format!("{prefix}: expected int8 codes and float16 scales"));
            }
            let g = group_for(args.format, dim);
            if sn != n || groups == 0 || dim % g != 0 || dim / g != groups {
                return Err(format!(
                    "{prefix}: scales shape [{sn}, {groups}] does not match codes [{n}, {dim}] for {:?}",
                    args.format
                ));
            }
            let codes: Vec<i8> = q.into_vec().map_err(|e| e.to_string())?;
            let scales: Vec<f16> = s.into_vec().map_err(|e| e.to_string())?;
            let mut out = vec![0f32; n * dim];
            quant::dequantize_q8(&codes, &scales, g, &mut out).map_err(msg)?;
            (n, dim, out)
        }
        Format::Fp8Tile => {
            let (q, [n, dv]) = read_npy(&path("q"))?;
            let (s, [_, tiles]) = read_npy(&path("scales"))?;
            let (r, [rn, rb]) = read_npy(&path("rows"))?;
            if dtype_of(&r) != "|u1" || rn != n || tiles == 0 || dv % tiles != 0 {
                return Err(format!(
                    "{prefix}: rows / codes / scales shapes or dtypes do not match"
                ));
            }
            drop((q, s));
            let tile = dv / tiles;
            let eb = if args.bf16 { 2 } else { 4 };
            let head = dv + 4 * tiles;
            if rb < head || (rb - head) % eb != 0 {
                return Err(format!(
                    "{prefix}: row bytes {rb} do not fit dv {dv}, tile {tile}"
                ));
            }
            let dim = dv + (rb - head) / eb;
            let bytes: Vec<u8> = r.into_vec().map_err(|e| e.to_string())?;
            let mut out = vec![0f32; n * dim];
            for (row, o) in bytes.chunks_exact(rb).zip(out.chunks_exact_mut(dim)) {
                quant::dequantize_fp8_tile(row, dv, tile, args.bf16, o).map_err(msg)?;
            }
            (n, dim, out)
        }
        Format::Q4_0 | Format::Q4_1 => {
            let kind = args.format.q4().ok_or("not a 4-bit format")?;
            let (b, shape) = read_npy_nd(&path("blocks"))?;
            let [n, blocks, bb] = shape[..] else {
                return Err(format!(
                    "{prefix}.blocks.npy: expected a 3-D [rows, dim / 32, block bytes] array, got shape {shape:?}"
                ));
            };
            if dtype_of(&b) != "|u1" || bb != kind.block_bytes() || blocks == 0 {
                return Err(format!(
                    "{prefix}.blocks.npy: expected uint8 blocks of {} bytes for {:?}, got dtype {} and shape {shape:?}",
                    kind.block_bytes(),
                    args.format,
                    dtype_of(&b)
                ));
            }
            let bytes: Vec<u8> = b.into_vec().map_err(|e| e.to_string())?;
            let dim = blocks * Q4_BLOCK;
            let mut out = vec![0f32; n * dim];
            quant::dequantize_q4(kind, &bytes, &mut out).map_err(msg)?;
            (n, dim, out)
        }
    };
    write_all(&[(output.to_path_buf(), npy_bytes(&[n, dim], &out)?)])
}
