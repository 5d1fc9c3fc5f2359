//! The model's trace file: one line per executed WQE, written CQE and notable event, in the
//! format documented in `docs/model-trace.md`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

pub struct Trace {
    out: BufWriter<File>,
    seq: u64,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Trace {
    pub fn create(path: &Path) -> std::io::Result<Trace> {
        let mut out = BufWriter::new(File::create(path)?);
        writeln!(out, "# rawpkt mlx5 model trace v1")?;
        Ok(Trace { out, seq: 0 })
    }

    fn next(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// `WQE <seq> qpn=<hex> pi=<wqebb counter> bbs=<n> <hex of the WQEBBs>`
    pub fn wqe(&mut self, qpn: u32, pi: u32, bytes: &[u8]) {
        let seq = self.next();
        let _ = writeln!(
            self.out,
            "WQE {seq} qpn={qpn:#x} pi={pi} bbs={} {}",
            bytes.len() / 64,
            hex(bytes)
        );
    }

    /// `CQE <seq> cqn=<hex> pi=<producer index> <hex of 64 bytes>`
    pub fn cqe(&mut self, cqn: u32, pi: u32, bytes: &[u8; 64]) {
        let seq = self.next();
        let _ = writeln!(self.out, "CQE {seq} cqn={cqn:#x} pi={pi} {}", hex(bytes));
    }

    /// `EV <seq> <KIND> key=value ...`
    pub fn event(&mut self, args: std::fmt::Arguments<'_>) {
        let seq = self.next();
        let _ = writeln!(self.out, "EV {seq} {args}");
    }

    pub fn flush(&mut self) {
        let _ = self.out.flush();
    }
}
