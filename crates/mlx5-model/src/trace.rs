//! The model's trace file: one line per executed WQE, written CQE and notable event, in the
//! format documented in `docs/model-trace.md`.
//!
//! One file per NIC: the first NIC of a process that asks for `<path>` writes `<path>`, later
//! ones (two model NICs in one process, both told `RAWPKT_MODEL_TRACE` at creation) write
//! `<path>.1`, `<path>.2`, ..., instead of truncating each other's. A trace is flushed when its
//! NIC is dropped, at least once a second while records come, and at process exit (`atexit`),
//! so the trace of a NIC that lives as long as the process (the model library's) ends on a
//! whole record.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Once, Weak};
use std::time::{Duration, Instant};

type Out = Arc<Mutex<BufWriter<File>>>;

/// Every trace file of the process, for the exit flush, and how many NICs asked for each path.
struct Files {
    live: Vec<Weak<Mutex<BufWriter<File>>>>,
    taken: HashMap<PathBuf, u32>,
}

static FILES: Mutex<Option<Files>> = Mutex::new(None);

fn files() -> MutexGuard<'static, Option<Files>> {
    FILES.lock().unwrap_or_else(|e| e.into_inner())
}

fn lock(out: &Mutex<BufWriter<File>>) -> MutexGuard<'_, BufWriter<File>> {
    out.lock().unwrap_or_else(|e| e.into_inner())
}

/// How long buffered records may wait while more come.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

pub struct Trace {
    out: Out,
    seq: u64,
    path: PathBuf,
    flushed: Instant,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

extern "C" fn flush_all_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let outs: Vec<Out> = files()
            .as_ref()
            .map(|f| f.live.iter().filter_map(Weak::upgrade).collect())
            .unwrap_or_default();
        for o in outs {
            let _ = lock(&o).flush();
        }
    });
}

impl Trace {
    /// Creates the trace file for a new NIC: `path`, or `path.<n>` when `n` NICs of this
    /// process have asked for `path` before; a path that names no regular file is refused
    /// (`sys::file::create_write`).
    pub fn create(path: &Path, behaviour: &str) -> std::io::Result<Trace> {
        static AT_EXIT: Once = Once::new();
        AT_EXIT.call_once(|| {
            // SAFETY: registering a plain extern "C" fn with no arguments; it runs at normal
            // exit and catches any panic itself.
            unsafe { libc::atexit(flush_all_at_exit) };
        });
        let mut f = files();
        let f = f.get_or_insert_with(|| Files {
            live: Vec::new(),
            taken: HashMap::new(),
        });
        let n = f.taken.entry(path.to_path_buf()).or_insert(0);
        let path = match *n {
            0 => path.to_path_buf(),
            k => {
                let mut p = path.as_os_str().to_owned();
                p.push(format!(".{k}"));
                PathBuf::from(p)
            }
        };
        // A regular file only: a FIFO with no reader would block the NIC's creation in open(),
        // and one with a reader, or a device, the device's thread in its writes.
        let mut w = BufWriter::new(rawpkt_sys::file::create_write(&path)?);
        *n += 1;
        writeln!(w, "# rawpkt mlx5 model trace v2")?;
        writeln!(w, "# profile {behaviour}")?;
        let out = Arc::new(Mutex::new(w));
        f.live.retain(|w| w.strong_count() > 0);
        f.live.push(Arc::downgrade(&out));
        Ok(Trace {
            out,
            seq: 0,
            path,
            flushed: Instant::now(),
        })
    }

    /// The file this trace writes.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn next(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn line(&mut self, args: std::fmt::Arguments<'_>) {
        let mut out = lock(&self.out);
        let _ = out.write_fmt(args);
        if self.flushed.elapsed() >= FLUSH_EVERY {
            let _ = out.flush();
            self.flushed = Instant::now();
        }
    }

    /// `WQE <seq> qpn=<hex> pi=<wqebb counter> bbs=<n> <hex of the WQEBBs>`
    pub fn wqe(&mut self, qpn: u32, pi: u32, bytes: &[u8]) {
        let seq = self.next();
        self.line(format_args!(
            "WQE {seq} qpn={qpn:#x} pi={pi} bbs={} {}\n",
            bytes.len() / 64,
            hex(bytes)
        ));
    }

    /// `CQE <seq> cqn=<hex> pi=<producer index> <hex of 64 bytes>`
    pub fn cqe(&mut self, cqn: u32, pi: u32, bytes: &[u8; 64]) {
        let seq = self.next();
        self.line(format_args!("CQE {seq} cqn={cqn:#x} pi={pi} {}\n", hex(bytes)));
    }

    /// `CQE <seq> cqn=<hex> pi=<producer index> <hex of 64 bytes> title=<n>`: the title of a
    /// compressed session of `n` completions.
    pub fn cqe_title(&mut self, cqn: u32, pi: u32, bytes: &[u8; 64], n: u32) {
        let seq = self.next();
        self.line(format_args!(
            "CQE {seq} cqn={cqn:#x} pi={pi} {} title={n}\n",
            hex(bytes)
        ));
    }

    /// `MINI <seq> cqn=<hex> pi=<slot counter> n=<k> fmt=<format> <hex of 8k bytes>`: a mini-CQE
    /// array of `k` entries written at CQ slot counter `pi`.
    pub fn mini(&mut self, cqn: u32, pi: u32, fmt: &str, bytes: &[u8]) {
        let seq = self.next();
        self.line(format_args!(
            "MINI {seq} cqn={cqn:#x} pi={pi} n={} fmt={fmt} {}\n",
            bytes.len() / 8,
            hex(bytes)
        ));
    }

    /// `RWQE <seq> wqn=<hex> wqe=<counter> <hex>`: a receive WQE read, bytes in memory order.
    pub fn rwqe(&mut self, wqn: u32, wqe: u32, bytes: &[u8]) {
        let seq = self.next();
        self.line(format_args!("RWQE {seq} wqn={wqn:#x} wqe={wqe} {}\n", hex(bytes)));
    }

    /// `RDB <seq> wqn=<hex> record=<n>`: the RQ's doorbell record read, and it said more WQEs
    /// are posted than the device knew of.
    pub fn rdb(&mut self, wqn: u32, record: u32) {
        let seq = self.next();
        self.line(format_args!("RDB {seq} wqn={wqn:#x} record={record}\n"));
    }

    /// `RXD <seq> wqn=<hex> addr=<hex> len=<n>`: frame bytes placed in a receive buffer.
    pub fn rxd(&mut self, wqn: u32, addr: u64, len: usize) {
        let seq = self.next();
        self.line(format_args!("RXD {seq} wqn={wqn:#x} addr={addr:#x} len={len}\n"));
    }

    /// `CQCI <seq> cqn=<hex> ci=<n>`: the CQ's consumer index read from its doorbell record.
    pub fn cqci(&mut self, cqn: u32, ci: u32) {
        let seq = self.next();
        self.line(format_args!("CQCI {seq} cqn={cqn:#x} ci={ci}\n"));
    }

    /// `EV <seq> <KIND> key=value ...`
    pub fn event(&mut self, args: std::fmt::Arguments<'_>) {
        let seq = self.next();
        self.line(format_args!("EV {seq} {args}\n"));
    }

    pub fn flush(&mut self) {
        let _ = lock(&self.out).flush();
        self.flushed = Instant::now();
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_traces_of_one_path_get_two_files_and_whole_records() {
        let base = std::env::temp_dir().join(format!("rawpkt-trace-unit-{}", std::process::id()));
        let mut a = Trace::create(&base, "default").unwrap();
        let mut b = Trace::create(&base, "cx5 wqe_id=ring").unwrap();
        assert_eq!(a.path(), base);
        assert_eq!(b.path(), PathBuf::from(format!("{}.1", base.display())));
        a.event(format_args!("A x=1"));
        b.event(format_args!("B y=2"));
        // Flushed at exit by the atexit handler; here, explicitly, as a NIC's drop does.
        flush_all_at_exit();
        let ta = std::fs::read_to_string(a.path()).unwrap();
        let tb = std::fs::read_to_string(b.path()).unwrap();
        assert_eq!(ta, "# rawpkt mlx5 model trace v2\n# profile default\nEV 1 A x=1\n");
        assert_eq!(
            tb,
            "# rawpkt mlx5 model trace v2\n# profile cx5 wqe_id=ring\nEV 1 B y=2\n"
        );
        let (pa, pb) = (a.path().to_path_buf(), b.path().to_path_buf());
        drop((a, b));
        let _ = std::fs::remove_file(pa);
        let _ = std::fs::remove_file(pb);
    }
}
