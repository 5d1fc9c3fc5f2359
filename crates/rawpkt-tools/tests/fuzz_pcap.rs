//! Fuzz target: the pcap reader (`pcap::Reader::from_bytes`, what `Reader::open` parses a file
//! with).
//!
//! Inputs: files our writer makes (random frames and timestamps), the same in the three other
//! pcap flavours (big-endian, microsecond), pcapng files our writer makes, those mutated
//! (lengths, magic, link type, cuts), and raw bytes. Invariants, against a separate walk of the
//! classic format written here (a pcapng file, whose blocks the unit tests of `pcap.rs` check
//! against fixtures, must read back as written when unmutated, and otherwise read or be
//! refused in one line within the same memory bound):
//! - the reader accepts exactly the files the walk accepts, with the same records (timestamp in
//!   ns and bytes), so every record lies inside the file and together they tile it;
//! - it refuses the others with the error the walk names (too short, magic, link type, or the
//!   record that is cut, where and by how much), in one line;
//! - it never allocates more than a small multiple of the file's size (a corrupt length field
//!   of 4 GiB must not be believed), measured with a counting allocator.

use rawpkt_test_support::fuzz;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use rawpkt_tools::pcap::{Format, PcapError, Reader, Writer};

/// Counts the bytes live and their peak, per thread (the test harness allocates on others).
struct Counting;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters are
// thread-local cells with const initialisers, so touching them does not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = LIVE.try_with(|c| {
            c.set(c.get() + l.size());
            let _ = PEAK.try_with(|p| p.set(p.get().max(c.get())));
        });
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(l) }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        let _ = LIVE.try_with(|c| c.set(c.get().saturating_sub(l.size())));
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let _ = LIVE.try_with(|c| {
            c.set(c.get().saturating_sub(l.size()) + new);
            let _ = PEAK.try_with(|p| p.set(p.get().max(c.get())));
        });
        // SAFETY: as above.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// What the walk finds.
#[derive(Debug, PartialEq)]
enum Want {
    Records(Vec<(u64, Vec<u8>)>),
    TooShort,
    NotPcap(u32),
    Linktype(u32),
    /// record (from 1), offset of its header, bytes it needs, bytes left
    Truncated(usize, usize, usize, usize),
    /// A pcapng section header: what was written, if the file is unmutated.
    Pcapng,
}

/// The pcap format (libpcap's `pcap-savefile(5)`): a 24-byte header whose magic gives the byte
/// order and the timestamp unit, link type in bytes 20..24, then records of a 16-byte header
/// (seconds, fraction, captured length, original length) and the captured bytes.
fn walk(d: &[u8]) -> Want {
    if d.len() < 24 {
        return Want::TooShort;
    }
    let le = |b: &[u8]| u32::from_le_bytes(b[..4].try_into().unwrap());
    let be = |b: &[u8]| u32::from_be_bytes(b[..4].try_into().unwrap());
    let (big, unit) = match (le(d), be(d)) {
        (0xa1b2_c3d4, _) => (false, 1000),
        (0xa1b2_3c4d, _) => (false, 1),
        (_, 0xa1b2_c3d4) => (true, 1000),
        (_, 0xa1b2_3c4d) => (true, 1),
        (0x0a0d_0d0a, _) => return Want::Pcapng,
        (m, _) => return Want::NotPcap(m),
    };
    let word = |b: &[u8]| if big { be(b) } else { le(b) };
    if word(&d[20..]) != 1 {
        return Want::Linktype(word(&d[20..]));
    }
    let mut out = Vec::new();
    let mut at = 24;
    while at < d.len() {
        let left = d.len() - at;
        if left < 16 {
            return Want::Truncated(out.len() + 1, at, 16, left);
        }
        let caplen = word(&d[at + 8..]) as u64;
        if caplen > (left - 16) as u64 {
            return Want::Truncated(out.len() + 1, at, caplen as usize, left - 16);
        }
        let ts = u64::from(word(&d[at..])) * 1_000_000_000 + u64::from(word(&d[at + 4..])) * unit;
        let start = at + 16;
        out.push((ts, d[start..start + caplen as usize].to_vec()));
        at = start + caplen as usize;
    }
    Want::Records(out)
}

/// Bytes to read, and the records a pcapng file among them was written with.
type Input = (Vec<u8>, Option<Vec<(u64, Vec<u8>)>>);

/// A file our writer makes, and its records when it is pcapng.
fn file(rng: &mut fuzz::Rng) -> Input {
    let ng = rng.one_in(4);
    let mut w = Writer::new_as(Vec::new(), if ng { Format::Pcapng } else { Format::Pcap }).unwrap();
    let mut frames = Vec::new();
    for _ in 0..rng.below(12) {
        let len = match rng.below(4) {
            0 => rng.below(16),
            1 => 60 + rng.below(1455),
            _ => 14 + rng.below(120),
        };
        let ts = rng.next() % (u64::from(u32::MAX) * 1_000_000_000);
        let f = rng.bytes(len);
        w.write(ts, &f).unwrap();
        frames.push((ts, f));
    }
    let mut d = w.into_inner().unwrap();
    if ng {
        return (d, Some(frames));
    }
    // Another flavour: swap the byte order of every header word, and/or use microseconds.
    let big = rng.one_in(2);
    let micro = rng.one_in(2);
    if big || micro {
        let fix = |d: &mut Vec<u8>, at: usize, v: u32| {
            let b = if big { v.to_be_bytes() } else { v.to_le_bytes() };
            d[at..at + 4].copy_from_slice(&b);
        };
        let rd = |d: &[u8], at: usize| u32::from_le_bytes(d[at..at + 4].try_into().unwrap());
        fix(&mut d, 0, if micro { 0xa1b2_c3d4 } else { 0xa1b2_3c4d });
        for at in [8, 12, 16, 20] {
            let v = rd(&d, at);
            fix(&mut d, at, v);
        }
        let mut at = 24;
        while at < d.len() {
            let (sec, frac, cap, orig) = (rd(&d, at), rd(&d, at + 4), rd(&d, at + 8), rd(&d, at + 12));
            fix(&mut d, at, sec);
            fix(&mut d, at + 4, if micro { frac / 1000 } else { frac });
            fix(&mut d, at + 8, cap);
            fix(&mut d, at + 12, orig);
            at += 16 + cap as usize;
        }
    }
    (d, None)
}

/// Bytes to read, and what a pcapng file among them must read as (unmutated).
fn input(rng: &mut fuzz::Rng) -> Input {
    match rng.below(8) {
        0 => {
            let n = rng.below(64);
            (rng.bytes(n), None)
        }
        1..=2 => file(rng),
        3 => {
            // A record whose captured length is huge: believed, it would ask for 4 GiB (the
            // captured length of a classic record; of a pcapng file, the length of its
            // interface block or its first packet's interface field).
            let (mut d, _) = file(rng);
            if d.len() >= 40 {
                d[32..36].copy_from_slice(&[0xff, 0xff, 0xff, rng.byte()]);
            }
            (d, None)
        }
        _ => {
            let (mut d, _) = file(rng);
            rng.mutate(&mut d);
            (d, None)
        }
    }
}

fn check((d, ng): Input, seen: &mut [u64; 6]) {
    let want = match (walk(&d), ng) {
        (Want::Pcapng, Some(recs)) => Want::Records(recs),
        (w, _) => w,
    };
    seen[match want {
        Want::Records(_) => 0,
        Want::TooShort => 1,
        Want::NotPcap(_) => 2,
        Want::Linktype(_) => 3,
        Want::Truncated(..) => 4,
        Want::Pcapng => 5,
    }] += 1;
    let len = d.len();
    PEAK.with(|p| p.set(LIVE.with(Cell::get)));
    let before = LIVE.with(Cell::get);
    let got = Reader::from_bytes("fuzz.pcap", d);
    let peak = PEAK.with(Cell::get) - before;
    // The records' index (24 bytes per record of at least 16) with the vector's doubling, and the
    // error's path.
    let bound = 4 * len + 1024;
    assert!(
        peak <= bound,
        "reading {len} bytes allocated {peak} bytes at the peak (bound {bound})"
    );
    match (got, want) {
        (Ok(r), Want::Records(recs)) => {
            assert_eq!(r.len(), recs.len());
            for (i, (ts, f)) in recs.iter().enumerate() {
                let (t, g) = r.get(i).unwrap();
                assert_eq!((t, g), (*ts, &f[..]), "record {}", i + 1);
            }
            assert!(r.get(recs.len()).is_none());
            assert_eq!(r.iter().len(), recs.len());
        }
        (Ok(_), Want::Pcapng) => {}
        (Err(e), want) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n') && msg.len() <= 400, "not one bounded line: {msg:?}");
            if want == Want::Pcapng {
                return;
            }
            let got = match e {
                PcapError::TooShort { len: l, .. } => {
                    assert_eq!(l, len);
                    Want::TooShort
                }
                PcapError::NotPcap { magic, .. } => Want::NotPcap(magic),
                PcapError::Linktype { linktype, .. } => Want::Linktype(linktype),
                PcapError::Truncated {
                    record,
                    offset,
                    needs,
                    left,
                    ..
                } => Want::Truncated(record, offset, needs, left),
                other => panic!("unexpected error for bytes in memory: {other}"),
            };
            assert_eq!(got, want, "{msg}");
        }
        (Ok(r), want) => panic!("accepted ({} records) what should be refused: {want:?}", r.len()),
    }
}

#[test]
fn fuzz_pcap() {
    let mut seen = [0; 6];
    let n = fuzz::run("fuzz_pcap", 200_000, |rng, _| check(input(rng), &mut seen));
    eprintln!("accepted, too short, not pcap, link type, truncated, mutated pcapng: {seen:?}");
    // Every outcome must be reached, or the generator misses part of the reader.
    assert!(n < 1000 || seen.iter().all(|&k| k * 100 > n), "{seen:?} of {n}");
}
