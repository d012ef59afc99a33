//! Wiring edgekv's KV arena into the Arm Ethos-U driver: register the cache maintenance and the
//! per-region address maps once at start-up, bind the KV pages of a sequence as one base region,
//! and see what the driver's hooks do around an inference.
//!
//! Run on the host: `cargo run -p edgekv-capi --example ethosu_hooks --features ethosu`.
//! On a board, use the Cortex-M cache maintenance instead of the logging one below, and the
//! driver (not this example) calls the three hooks.

use core::ffi::c_int;
use std::sync::Mutex;

use edgekv::{ArenaBuf, CacheConfig, Kv, KvCache, SeqMode, Shape};
use edgekv_capi::ethosu::{
    self, EthosuHooks, Registration, ethosu_address_remap, ethosu_flush_dcache,
    ethosu_invalidate_dcache,
};
use edgekv_hal::{CacheMaintenance, DevAddr, HalError, OffsetMap, bind_region, line_aligned};

/// A data cache that only logs what it is asked (32-byte lines, like Cortex-M55's).
#[derive(Clone)]
struct LoggingCache;

static LOG: Mutex<Vec<String>> = Mutex::new(Vec::new());

impl LoggingCache {
    fn log(&self, op: &str, addr: usize, len: usize) -> Result<(), HalError> {
        line_aligned(addr, len, 32)?;
        LOG.lock()
            .unwrap()
            .push(format!("{op:>16} {addr:#x} +{len}"));
        Ok(())
    }
}

impl CacheMaintenance for LoggingCache {
    fn line_size(&self) -> usize {
        32
    }
    fn clean(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        self.log("clean", addr, len)
    }
    fn invalidate(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        self.log("invalidate", addr, len)
    }
    fn clean_invalidate(&mut self, addr: usize, len: usize) -> Result<(), HalError> {
        self.log("clean+invalidate", addr, len)
    }
}

/// Base-pointer region the command stream uses for the KV arena (set by the model compiler).
const KV_REGION: usize = 3;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The KV cache: one layer, 2 KV heads of 16, f32 pages of 16 tokens.
    let cfg = CacheConfig::new(Shape {
        layers: 1,
        kv_heads: 2,
        head_dim: 16,
    });
    let data = Box::leak(Box::new(ArenaBuf::<65536>::new()));
    let meta = Box::leak(Box::new(ArenaBuf::<8192>::new()));
    let mut cache: KvCache = KvCache::new(cfg, data.as_uninit_mut(), meta.as_uninit_mut())?;
    let seq = cache.create_sequence(SeqMode::Paged)?;
    let first = cache.reserve(seq, 20)?;
    cache.write(seq, 0, Kv::K, first, &vec![0.5f32; 20 * 32])?;

    // The NPU sees the arena through an alias 0x1000_0000 above the CPU address (as a TCM or
    // a bus offset would make it). Registered once: the hooks read it through a static.
    let cpu = cache.data_ptr() as usize;
    let alias = OffsetMap::new(
        cpu,
        cache.arena_plan().data_bytes,
        DevAddr(cpu as u64 + 0x1000_0000),
    )?;
    let hooks: &'static EthosuHooks<LoggingCache, OffsetMap> = Box::leak(Box::new(
        EthosuHooks::new(LoggingCache).with_region(KV_REGION, alias),
    ));
    let registration: &'static Registration = Box::leak(Box::new(Registration::new(hooks)));
    ethosu::register(registration);

    // Bind the sequence's K pages as region KV_REGION: the offsets go into the NPU job, the
    // region's device address into base pointer KV_REGION (bind_region also cleans the pages).
    let mut offsets = [0u32; 4];
    let region = bind_region(
        &cache,
        &alias,
        &mut LoggingCache,
        seq,
        0,
        Kv::K,
        &mut offsets,
        &mut [],
    )?;
    println!(
        "region {KV_REGION}: device base {:#x}, {} bytes",
        region.base.0, region.len
    );
    println!("page offsets: {:?}", &offsets[..region.pages]);

    // What the driver does around `ethosu_invoke`: remap each base pointer, flush each region,
    // run, invalidate each region. Here with the CPU address and size of the KV region.
    let remapped = ethosu_address_remap(cpu as u64, KV_REGION as c_int);
    println!("ethosu_address_remap({cpu:#x}, {KV_REGION}) = {remapped:#x}");
    assert_eq!(remapped, region.base.0);
    ethosu_flush_dcache(cache.data_ptr().cast_mut().cast(), 100); // rounded out to lines
    ethosu_invalidate_dcache(cache.data_ptr().wrapping_add(8).cast_mut().cast(), 100);
    assert_eq!(ethosu::take_last_error(), edgekv_capi::EKV_OK);
    for line in LOG.lock().unwrap().iter() {
        println!("{line}");
    }
    Ok(())
}
