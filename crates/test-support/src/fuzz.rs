//! The fuzz driver the `tests/fuzz_*.rs` targets share (stable Rust: no cargo-fuzz, no nightly).
//!
//! Each case gets its own generator seeded from (seed, case number), so one failing case is
//! replayed alone. Environment:
//! - `RAWPKT_FUZZ_N`: cases per target (`1e7`, `10000000`, …); each target has a default that CI
//!   runs (at least 10^5).
//! - `RAWPKT_FUZZ_SEED`: the run's seed (default fixed, so CI is deterministic).
//! - `RAWPKT_FUZZ_CASE`: run only this case (what a failure message tells you to set).
//! - `RAWPKT_FUZZ_KEEP_GOING=1`: do not stop at the first failing case; count them all and
//!   list the first ten (for long runs, to see every kind of failure at once).
//!
//! docs/fuzz.md has the targets, their invariants and the 10^7 command.
#![allow(dead_code)] // each target uses part of it

pub mod frames;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

/// splitmix64 (Steele, Lea, Flood 2014): tiny, fast, good enough to drive a fuzzer, and the same
/// sequence on every machine.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0; the bias of a 64-bit modulo does not matter here).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `1 / n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub fn byte(&mut self) -> u8 {
        self.next() as u8
    }

    pub fn u16(&mut self) -> u16 {
        self.next() as u16
    }

    pub fn u32(&mut self) -> u32 {
        self.next() as u32
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }

    /// A value near the edges more often than a uniform draw would give: 0, 1, the maximum and
    /// its neighbours, powers of two.
    pub fn edgy(&mut self, max: u64) -> u64 {
        match self.below(6) {
            0 => 0,
            1 => max,
            2 => max.saturating_sub(self.below(3) as u64),
            3 => (1u64 << self.below(64)).min(max),
            4 => self.below(4) as u64 % (max + 1),
            _ => self.next() % max.saturating_add(1).max(1),
        }
    }

    /// Mutates `data` in place a few times: flips, overwrites with edge bytes, inserts, deletes,
    /// duplicates a chunk, truncates.
    pub fn mutate(&mut self, data: &mut Vec<u8>) {
        for _ in 0..1 + self.below(4) {
            let len = data.len();
            match self.below(7) {
                0 if len > 0 => {
                    let i = self.below(len);
                    data[i] ^= 1 << self.below(8);
                }
                1 if len > 0 => {
                    let i = self.below(len);
                    data[i] = *self.pick(&[0, 1, 0x7f, 0x80, 0xff, b'\n', b' ', b'/', b'.', b':']);
                }
                2 => {
                    let i = self.below(len + 1);
                    let b = self.byte();
                    data.insert(i, b);
                }
                3 if len > 0 => {
                    let i = self.below(len);
                    let n = self.below(len - i).min(8) + 1;
                    data.drain(i..i + n);
                }
                4 if len > 0 => {
                    let i = self.below(len);
                    let n = (self.below(len - i) + 1).min(32);
                    let chunk: Vec<u8> = data[i..i + n].to_vec();
                    let at = self.below(data.len() + 1);
                    data.splice(at..at, chunk);
                }
                5 if len > 0 => data.truncate(self.below(len)),
                _ if len > 1 => {
                    // A big-endian 16-bit field set to an edge value: lengths, ports, types.
                    let i = self.below(len - 1);
                    let v = self.edgy(0xffff) as u16;
                    data[i..i + 2].copy_from_slice(&v.to_be_bytes());
                }
                _ => data.push(self.byte()),
            }
        }
    }
}

fn env_count(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.split_once(['e', 'E']) {
        Some((m, e)) => m
            .parse::<u64>()
            .ok()
            .zip(e.parse::<u32>().ok())
            .and_then(|(m, e)| m.checked_mul(10u64.checked_pow(e)?)),
        None => v.replace('_', "").parse().ok(),
    };
    Some(parsed.unwrap_or_else(|| panic!("{name}={v:?}: expected a count such as 100000 or 1e7")))
}

/// Runs `case(rng, i)` for the target's cases; a failing case is reported with what replays it.
/// Returns the number of cases run.
pub fn run(target: &str, default_cases: u64, mut case: impl FnMut(&mut Rng, u64)) -> u64 {
    let n = env_count("RAWPKT_FUZZ_N").unwrap_or(default_cases);
    let seed = env_count("RAWPKT_FUZZ_SEED").unwrap_or(0x7261_7770_6b74); // "rawpkt"
    let only = env_count("RAWPKT_FUZZ_CASE");
    let start = Instant::now();
    let cases: Box<dyn Iterator<Item = u64>> = match only {
        Some(i) => Box::new(std::iter::once(i)),
        None => Box::new(0..n),
    };
    let keep_going = std::env::var_os("RAWPKT_FUZZ_KEEP_GOING").is_some_and(|v| v == "1");
    let (mut ran, mut failed) = (0u64, Vec::new());
    // Going on after failures: the default hook would print every one with its backtrace.
    let hook = keep_going.then(|| {
        let h = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        h
    });
    for i in cases {
        let mut rng = Rng::new(seed ^ i.wrapping_mul(0xd134_2543_de82_ef95));
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| case(&mut rng, i))) {
            let msg = e
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| e.downcast_ref::<&str>().copied())
                .unwrap_or("(non-string panic)");
            let replay = format!("RAWPKT_FUZZ_SEED={seed} RAWPKT_FUZZ_CASE={i} cargo test --test {target}");
            if !keep_going {
                panic!("fuzz target {target}: case {i} failed: {msg}\n  replay: {replay}");
            }
            let cut: String = msg.chars().take(600).collect();
            failed.push(format!("case {i}: {cut}\n  replay: {replay}"));
        }
        ran += 1;
    }
    if let Some(h) = hook {
        std::panic::set_hook(h);
    }
    if !failed.is_empty() {
        panic!(
            "fuzz target {target}: {} of {ran} cases failed; the first ones:\n{}",
            failed.len(),
            failed.iter().take(10).cloned().collect::<Vec<_>>().join("\n")
        );
    }
    eprintln!(
        "fuzz target {target}: {ran} cases in {:.2} s (seed {seed})",
        start.elapsed().as_secs_f64()
    );
    ran
}
