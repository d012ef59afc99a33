//! Stack high-water marks for the QEMU board firmware, so that firmware engineers can size their
//! stacks from a number: [`Painter::paint`] fills a window of the free stack below the caller
//! with a pattern, the code under test runs, and [`Painter::deepest`] scans for the lowest word
//! that no longer holds the pattern. Figures are bytes from the top of the stack
//! (cortex-m-rt's `_stack_start`), so they include the firmware's own frames above the call and
//! any interrupt taken meanwhile (the clock's SysTick wrap): what the stack must hold.
//!
//! [`Marks`] keeps the deepest figure per named kind of call, in a fixed-capacity map
//! (`heapless`), for firmware that measures between the events of a run.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]

use core::ptr::{addr_of, read_volatile, write_volatile};

/// The pattern painted into free stack words.
const PAINT: u32 = 0xEDC0_57AC;

/// Bytes below the painter's own frame left unpainted (its frame and locals).
const MARGIN: usize = 256;

/// Bytes painted below the caller at most: deeper use is reported as [`Depth::Beyond`]. Painting
/// 64 KiB costs about 50 thousand instructions, so firmware can repaint between calls.
pub const WINDOW: usize = 64 * 1024;

unsafe extern "C" {
    /// cortex-m-rt: the initial stack pointer (the stack's top, exclusive).
    static _stack_start: u32;
    /// cortex-m-rt: the lowest address the stack may grow to.
    static _stack_end: u32;
}

/// The stack's top (exclusive) and lowest address.
fn bounds() -> (usize, usize) {
    // Only the symbols' addresses are taken; nothing is read through them.
    (
        addr_of!(_stack_start) as usize,
        addr_of!(_stack_end) as usize,
    )
}

/// The deepest stack use seen since a paint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    /// Bytes from the top of the stack to the deepest word written (or to the painted window's
    /// top when no painted word was written: an upper bound then).
    Bytes(u32),
    /// The lowest painted word was written: the use went deeper than the window (or reached the
    /// stack's limit), and the figure would be a guess.
    Beyond,
}

impl Depth {
    /// The figure in bytes, [`Beyond`](Depth::Beyond) as `u32::MAX`.
    pub const fn bytes(self) -> u32 {
        match self {
            Depth::Bytes(b) => b,
            Depth::Beyond => u32::MAX,
        }
    }
}

/// Bytes between the stack's top and its limit: the most it can hold.
pub fn size() -> u32 {
    let (top, limit) = bounds();
    u32::try_from(top.saturating_sub(limit)).unwrap_or(u32::MAX)
}

/// Runs `f`, which calls its `lap(kind, detail)` argument after each step it wants measured:
/// each lap records the deepest use since the previous lap (or the start) under that kind in
/// `marks`, then repaints. Returns `f`'s result and the deepest use of the whole run.
pub fn laps<const N: usize, R>(
    marks: &mut Marks<N>,
    f: impl FnOnce(&mut dyn FnMut(&'static str, &'static str)) -> R,
) -> (R, u32) {
    let mut painter = Painter::paint();
    let mut deepest = 0u32;
    let r = f(&mut |kind, detail| {
        deepest = deepest.max(marks.record(kind, detail, painter.deepest()));
        painter = Painter::paint();
    });
    (r, deepest.max(painter.deepest().bytes()))
}

/// A painted window of free stack, `[low, high)`.
#[derive(Clone, Copy, Debug)]
pub struct Painter {
    low: usize,
    high: usize,
}

impl Painter {
    /// Paints up to [`WINDOW`] bytes of free stack below the caller (interrupts masked meanwhile,
    /// so no exception frame lands in the window while it is painted).
    #[inline(never)]
    pub fn paint() -> Self {
        cortex_m::interrupt::free(|_| {
            let (_, limit) = bounds();
            let sp = cortex_m::register::msp::read() as usize;
            let high = (sp.saturating_sub(MARGIN)) & !3;
            let low = high.saturating_sub(WINDOW).max(limit.next_multiple_of(4));
            let mut a = low;
            while a < high {
                // SAFETY: `[low, high)` lies between the stack's limit and MARGIN bytes below
                // the current stack pointer: free stack no live frame uses (interrupts are
                // masked, and this function calls nothing while it paints), word aligned.
                unsafe { write_volatile(a as *mut u32, PAINT) };
                a += 4;
            }
            Self { low, high }
        })
    }

    /// The deepest use since [`paint`](Self::paint).
    pub fn deepest(&self) -> Depth {
        let (top, _) = bounds();
        let mut a = self.low;
        while a < self.high {
            // SAFETY: a word of the window `paint` wrote, between the stack's limit and the top:
            // mapped RAM, word aligned; reading it races with nothing (single core, and a word
            // an interrupt writes meanwhile reads as either value, both of which are in use).
            if unsafe { read_volatile(a as *const u32) } != PAINT {
                break;
            }
            a += 4;
        }
        if a == self.low && self.low < self.high {
            return Depth::Beyond;
        }
        Depth::Bytes(u32::try_from(top - a).unwrap_or(u32::MAX))
    }
}

/// The deepest figure per kind of call (a label, and a detail such as a page format), at most
/// `N` kinds; [`Depth::Beyond`] counts as `u32::MAX`.
pub struct Marks<const N: usize> {
    deepest: heapless::LinearMap<(&'static str, &'static str), u32, N>,
    overflowed: bool,
}

impl<const N: usize> Default for Marks<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Marks<N> {
    /// No figures yet.
    pub const fn new() -> Self {
        Self {
            deepest: heapless::LinearMap::new(),
            overflowed: false,
        }
    }

    /// Records `depth` for `(kind, detail)`, keeping the deepest; returns it in bytes.
    pub fn record(&mut self, kind: &'static str, detail: &'static str, depth: Depth) -> u32 {
        let bytes = depth.bytes();
        match self.deepest.get_mut(&(kind, detail)) {
            Some(d) => *d = (*d).max(bytes),
            None => self.overflowed |= self.deepest.insert((kind, detail), bytes).is_err(),
        }
        bytes
    }

    /// Every kind with its deepest figure, in the order first seen.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &'static str, u32)> + '_ {
        self.deepest.iter().map(|(&(k, d), &b)| (k, d, b))
    }

    /// Logs each kind's figure as `stack <bytes> B: <kind> (<detail>)` (the host's board tests
    /// parse these lines), then `stack <bytes> B: size`.
    pub fn log(&self) {
        for (kind, detail, bytes) in self.iter() {
            if detail.is_empty() {
                defmt::println!("stack {=u32} B: {=str}", bytes, kind);
            } else {
                defmt::println!("stack {=u32} B: {=str} ({=str})", bytes, kind, detail);
            }
        }
        if self.overflowed {
            defmt::println!("stack {=u32} B: kinds dropped (Marks full)", u32::MAX);
        }
        defmt::println!("stack {=u32} B: size", size());
    }

    /// Whether a kind was dropped because all `N` places were taken.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }
}
