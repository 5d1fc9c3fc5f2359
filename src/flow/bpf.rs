//! Flow rules compiled to an XDP program, generated at run time (the Firedancer pattern,
//! `fd_xdp1.c`): a tiny eBPF assembler with labels, the rule compiler, and loading/test-running
//! through `bpf(2)`.
//!
//! The program parses the frame once, exactly as [`wire::headers`](super::wire::headers) does (up to two VLAN tags,
//! the EtherType after them, IPv4 with options by IHL, IPv6's fixed header without walking
//! extension headers, ports only in unfragmented packets and first fragments, a frame cut short
//! matching only the fields whose bytes it has), stores what it found on the stack, and then
//! tests the stealing rules against those values in the [`RuleSet`]'s evaluation order. All packet
//! reads happen in the parse, each behind a bounds check against `data_end`.
//!
//! **Copy rules are not compiled.** XDP gives one verdict per frame: it can redirect a frame to the
//! AF_XDP socket or pass it to Linux, not both. Copying needs a different mechanism (an AF_PACKET
//! socket, or a second program, e.g. tc with `bpf_clone_redirect`). Since a copy rule never ends
//! the kernel's search (see [`RuleSet::classify`]: a copy match only skips the rest of its own
//! table, and stealing rules live in other tables), the program's verdict is exactly
//! [`Verdict::steal`](super::matcher::Verdict::steal): steal if any stealing rule matches.
//! `xdp:` ports refuse copy rules when opened (`crate::xdp`), so no rule a user gives one is
//! silently left out of its program.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use super::matcher::{RuleSet, RuleSetError};
use super::rule::{FlowRule, IpMatch};
use super::wire::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_QINQ, ETHERTYPE_VLAN, IPPROTO_TCP, IPPROTO_UDP};

// Instruction classes, sizes, modes, operations and sources (include/uapi/linux/bpf_common.h, bpf.h).
pub(crate) const BPF_LD: u8 = 0x00;
pub(crate) const BPF_LDX: u8 = 0x01;
pub(crate) const BPF_ST: u8 = 0x02;
pub(crate) const BPF_STX: u8 = 0x03;
pub(crate) const BPF_ALU: u8 = 0x04;
pub(crate) const BPF_JMP: u8 = 0x05;
pub(crate) const BPF_JMP32: u8 = 0x06;
pub(crate) const BPF_ALU64: u8 = 0x07;

pub(crate) const BPF_W: u8 = 0x00;
pub(crate) const BPF_H: u8 = 0x08;
pub(crate) const BPF_B: u8 = 0x10;
pub(crate) const BPF_DW: u8 = 0x18;

pub(crate) const BPF_IMM: u8 = 0x00;
pub(crate) const BPF_MEM: u8 = 0x60;

pub(crate) const BPF_K: u8 = 0x00;
pub(crate) const BPF_X: u8 = 0x08;

pub(crate) const BPF_ADD: u8 = 0x00;
pub(crate) const BPF_OR: u8 = 0x40;
pub(crate) const BPF_AND: u8 = 0x50;
pub(crate) const BPF_LSH: u8 = 0x60;
pub(crate) const BPF_RSH: u8 = 0x70;
pub(crate) const BPF_MOV: u8 = 0xb0;
pub(crate) const BPF_END: u8 = 0xd0;
/// With `BPF_END`: convert to big-endian (a byte swap on little-endian hosts).
pub(crate) const BPF_TO_BE: u8 = 0x08;

pub(crate) const BPF_JA: u8 = 0x00;
pub(crate) const BPF_JEQ: u8 = 0x10;
pub(crate) const BPF_JGT: u8 = 0x20;
pub(crate) const BPF_JNE: u8 = 0x50;
pub(crate) const BPF_JLT: u8 = 0xa0;
pub(crate) const BPF_CALL: u8 = 0x80;
pub(crate) const BPF_EXIT: u8 = 0x90;

/// `src_reg` of a `BPF_LD_IMM64` whose immediate is a map file descriptor.
pub(crate) const BPF_PSEUDO_MAP_FD: u8 = 1;
/// `bpf_redirect_map(map, key, flags)`; the low bits of `flags` are the verdict when the map
/// has no entry for `key`.
pub(crate) const HELPER_REDIRECT_MAP: i32 = 51;

#[cfg(test)] // the test variant of the steal block
pub(crate) const XDP_DROP: u32 = 1;
pub(crate) const XDP_PASS: u32 = 2;

pub(crate) const R0: u8 = 0;
pub(crate) const R1: u8 = 1;
pub(crate) const R2: u8 = 2;
pub(crate) const R3: u8 = 3;
pub(crate) const R4: u8 = 4;
pub(crate) const R5: u8 = 5;
pub(crate) const R6: u8 = 6;
pub(crate) const R7: u8 = 7;
pub(crate) const R8: u8 = 8;
pub(crate) const R9: u8 = 9;
/// The read-only frame pointer; the program's 512-byte stack lies below it.
pub(crate) const R10: u8 = 10;

/// One `struct bpf_insn`: opcode, `dst_reg` in the low nibble and `src_reg` in the high nibble
/// of the second byte (on little-endian hosts; the kernel's bitfield order), offset, immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Insn {
    pub code: u8,
    pub dst: u8,
    pub src: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    pub(crate) const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Self {
        Insn {
            code,
            dst,
            src,
            off,
            imm,
        }
    }

    /// The 8 bytes the kernel reads, in host byte order.
    pub(crate) fn to_bytes(self) -> [u8; 8] {
        let regs = if cfg!(target_endian = "little") {
            (self.src << 4) | (self.dst & 0xf)
        } else {
            (self.dst << 4) | (self.src & 0xf)
        };
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = regs;
        b[2..4].copy_from_slice(&self.off.to_ne_bytes());
        b[4..8].copy_from_slice(&self.imm.to_ne_bytes());
        b
    }
}

/// Why [`Asm::finish`] refused the program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AsmError {
    UnknownLabel(String),
    DuplicateLabel(String),
    /// A jump from instruction `at` to `label` is farther than an `i16` offset reaches.
    JumpTooFar {
        at: usize,
        label: String,
    },
}

impl fmt::Display for AsmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AsmError::UnknownLabel(l) => write!(f, "jump to unknown label {l:?}"),
            AsmError::DuplicateLabel(l) => write!(f, "label {l:?} defined twice"),
            AsmError::JumpTooFar { at, label } => {
                write!(f, "jump at instruction {at} to {label:?} does not fit in 16 bits")
            }
        }
    }
}

impl std::error::Error for AsmError {}

/// An eBPF assembler: instructions are appended in order, jumps name a label, and
/// [`Asm::finish`] resolves the labels (offsets count from the instruction after the jump).
#[derive(Default)]
pub(crate) struct Asm {
    insns: Vec<Insn>,
    labels: HashMap<String, usize>,
    fixups: Vec<(usize, String)>,
    duplicate: Option<String>,
    map_fd_slots: Vec<usize>,
}

impl Asm {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Index of the next instruction.
    pub(crate) fn here(&self) -> usize {
        self.insns.len()
    }

    /// Defines `name` at the next instruction. A second definition is reported by `finish`.
    pub(crate) fn label(&mut self, name: impl Into<String>) -> &mut Self {
        let name = name.into();
        let at = self.insns.len();
        if self.labels.insert(name.clone(), at).is_some() && self.duplicate.is_none() {
            self.duplicate = Some(name);
        }
        self
    }

    pub(crate) fn raw(&mut self, insn: Insn) -> &mut Self {
        self.insns.push(insn);
        self
    }

    pub(crate) fn alu64_imm(&mut self, op: u8, dst: u8, imm: i32) -> &mut Self {
        self.raw(Insn::new(BPF_ALU64 | op | BPF_K, dst, 0, 0, imm))
    }

    pub(crate) fn alu64_reg(&mut self, op: u8, dst: u8, src: u8) -> &mut Self {
        self.raw(Insn::new(BPF_ALU64 | op | BPF_X, dst, src, 0, 0))
    }

    pub(crate) fn alu32_imm(&mut self, op: u8, dst: u8, imm: i32) -> &mut Self {
        self.raw(Insn::new(BPF_ALU | op | BPF_K, dst, 0, 0, imm))
    }

    pub(crate) fn mov64_imm(&mut self, dst: u8, imm: i32) -> &mut Self {
        self.alu64_imm(BPF_MOV, dst, imm)
    }

    pub(crate) fn mov64_reg(&mut self, dst: u8, src: u8) -> &mut Self {
        self.alu64_reg(BPF_MOV, dst, src)
    }

    /// `dst = to_be(dst)` over the low `bits` (16, 32 or 64), upper bits cleared.
    pub(crate) fn be(&mut self, dst: u8, bits: i32) -> &mut Self {
        self.raw(Insn::new(BPF_ALU | BPF_END | BPF_TO_BE, dst, 0, 0, bits))
    }

    /// `dst = *(size *)(src + off)`.
    pub(crate) fn ldx(&mut self, size: u8, dst: u8, src: u8, off: i16) -> &mut Self {
        self.raw(Insn::new(BPF_LDX | size | BPF_MEM, dst, src, off, 0))
    }

    /// `*(size *)(dst + off) = src`.
    pub(crate) fn stx(&mut self, size: u8, dst: u8, off: i16, src: u8) -> &mut Self {
        self.raw(Insn::new(BPF_STX | size | BPF_MEM, dst, src, off, 0))
    }

    /// `*(size *)(dst + off) = imm`.
    pub(crate) fn st(&mut self, size: u8, dst: u8, off: i16, imm: i32) -> &mut Self {
        self.raw(Insn::new(BPF_ST | size | BPF_MEM, dst, 0, off, imm))
    }

    /// `dst = imm` (64 bits, two instruction slots).
    pub(crate) fn ld_imm64(&mut self, dst: u8, imm: u64) -> &mut Self {
        self.raw(Insn::new(BPF_LD | BPF_DW | BPF_IMM, dst, 0, 0, imm as u32 as i32));
        self.raw(Insn::new(0, 0, 0, 0, (imm >> 32) as u32 as i32))
    }

    /// `dst = map` by file descriptor: the fd is filled in by [`Program::with_map_fd`].
    pub(crate) fn ld_map_fd(&mut self, dst: u8) -> &mut Self {
        self.map_fd_slots.push(self.insns.len());
        self.raw(Insn::new(BPF_LD | BPF_DW | BPF_IMM, dst, BPF_PSEUDO_MAP_FD, 0, 0));
        self.raw(Insn::new(0, 0, 0, 0, 0))
    }

    fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, label: &str) -> &mut Self {
        self.fixups.push((self.insns.len(), label.to_string()));
        self.raw(Insn::new(code, dst, src, 0, imm))
    }

    /// `if dst <op> imm goto label` comparing 64 bits (`imm` sign-extended).
    pub(crate) fn jmp_imm(&mut self, op: u8, dst: u8, imm: i32, label: &str) -> &mut Self {
        self.jump(BPF_JMP | op | BPF_K, dst, 0, imm, label)
    }

    /// `if dst <op> src goto label` comparing 64 bits.
    pub(crate) fn jmp_reg(&mut self, op: u8, dst: u8, src: u8, label: &str) -> &mut Self {
        self.jump(BPF_JMP | op | BPF_X, dst, src, 0, label)
    }

    /// `if (u32)dst <op> (u32)imm goto label`.
    pub(crate) fn jmp32_imm(&mut self, op: u8, dst: u8, imm: u32, label: &str) -> &mut Self {
        self.jump(BPF_JMP32 | op | BPF_K, dst, 0, imm as i32, label)
    }

    pub(crate) fn ja(&mut self, label: &str) -> &mut Self {
        self.jump(BPF_JMP | BPF_JA, 0, 0, 0, label)
    }

    pub(crate) fn call(&mut self, helper: i32) -> &mut Self {
        self.raw(Insn::new(BPF_JMP | BPF_CALL, 0, 0, 0, helper))
    }

    pub(crate) fn exit(&mut self) -> &mut Self {
        self.raw(Insn::new(BPF_JMP | BPF_EXIT, 0, 0, 0, 0))
    }

    /// Resolves every jump; fails on a duplicate label, a jump to a label never defined, or an
    /// offset outside `i16`.
    pub(crate) fn finish(self) -> Result<Program, AsmError> {
        if let Some(d) = self.duplicate {
            return Err(AsmError::DuplicateLabel(d));
        }
        let mut insns = self.insns;
        for (at, label) in self.fixups {
            let target = *self
                .labels
                .get(&label)
                .ok_or_else(|| AsmError::UnknownLabel(label.clone()))?;
            let off = target as i64 - (at as i64 + 1);
            insns[at].off = i16::try_from(off).map_err(|_| AsmError::JumpTooFar { at, label })?;
        }
        Ok(Program {
            insns,
            map_fd_slots: self.map_fd_slots,
        })
    }
}

/// An assembled program: instructions, and where the XSKMAP's fd goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Program {
    pub insns: Vec<Insn>,
    map_fd_slots: Vec<usize>,
}

impl Program {
    /// Whether the program refers to a map (the [`StealAction::Redirect`] variant).
    pub(crate) fn needs_map(&self) -> bool {
        !self.map_fd_slots.is_empty()
    }

    /// The program with every map reference set to `fd`.
    pub(crate) fn with_map_fd(&self, fd: i32) -> Program {
        let mut p = self.clone();
        for &i in &self.map_fd_slots {
            p.insns[i].imm = fd;
        }
        p
    }

    /// The image `BPF_PROG_LOAD` takes.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        self.insns.iter().flat_map(|i| i.to_bytes()).collect()
    }
}

/// What the program does with a frame a stealing rule matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StealAction {
    /// `bpf_redirect_map(xskmap, ctx->rx_queue_index, XDP_PASS)`: to the AF_XDP socket bound
    /// to the receiving queue, or to Linux when no socket is bound there.
    Redirect,
    /// `XDP_DROP`: a test variant whose verdict tells steal from pass even with no socket.
    #[cfg(test)]
    Drop,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CompileError {
    Rule(RuleSetError),
    Asm(AsmError),
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompileError::Rule(e) => e.fmt(f),
            CompileError::Asm(e) => write!(f, "assembling the XDP program: {e}"),
        }
    }
}

impl std::error::Error for CompileError {}

// Stack slots (8 bytes each, below R10) holding what the parse found.
const FLAGS: i16 = -8;
const DMAC: i16 = -16;
const SMAC: i16 = -24;
const TPID: i16 = -32;
const TCI: i16 = -40;
const ETYPE: i16 = -48;
/// 0: no IP header, 4 or 6.
const IPVER: i16 = -56;
const PROTO: i16 = -64;
const SPORT: i16 = -72;
const DPORT: i16 = -80;
/// Four address words each (IPv4 uses the first), big-endian values.
const SRC: i16 = -112;
const DST: i16 = -144;
const SLOTS: i16 = 18;

// FLAGS bits: which fields the frame has.
const HAS_DMAC: i32 = 1;
const HAS_SMAC: i32 = 2;
const HAS_VLAN: i32 = 4;
const HAS_ETYPE: i32 = 8;
const HAS_PORTS: i32 = 16;

// Registers during the parse: R6 ctx, R7 data, R8 data_end.
const CTX: u8 = R6;
const DATA: u8 = R7;
const END: u8 = R8;

/// `if DATA + n > END goto fail`.
fn need(a: &mut Asm, n: i32, fail: &str) {
    a.mov64_reg(R5, DATA)
        .alu64_imm(BPF_ADD, R5, n)
        .jmp_reg(BPF_JGT, R5, END, fail);
}

/// `FLAGS |= bit`.
fn set_flag(a: &mut Asm, bit: i32) {
    a.ldx(BPF_DW, R5, R10, FLAGS)
        .alu64_imm(BPF_OR, R5, bit)
        .stx(BPF_DW, R10, FLAGS, R5);
}

/// `dst = be16(*(u16 *)(DATA + off))`.
fn load16(a: &mut Asm, dst: u8, off: i16) {
    a.ldx(BPF_H, dst, DATA, off).be(dst, 16);
}

/// A MAC at `off` as a 48-bit number into `slot`.
fn load_mac(a: &mut Asm, off: i16, slot: i16) {
    a.ldx(BPF_W, R0, DATA, off)
        .be(R0, 32)
        .alu64_imm(BPF_LSH, R0, 16)
        .ldx(BPF_H, R1, DATA, off + 4)
        .be(R1, 16)
        .alu64_reg(BPF_OR, R0, R1)
        .stx(BPF_DW, R10, slot, R0);
}

/// The L3 parse for an IP header at the constant offset `off`; the EtherType is in R9.
fn parse_l3(a: &mut Asm, off: i16) {
    let v6 = format!("ipv6_{off}");
    let o = i32::from(off);
    // IPv4: version 4, IHL ≥ 5, the whole header in the frame, total length ≥ header length.
    a.jmp_imm(BPF_JNE, R9, i32::from(ETHERTYPE_IPV4), &v6);
    need(a, o + 20, "rules");
    a.ldx(BPF_B, R0, DATA, off).mov64_reg(R1, R0).alu64_imm(BPF_RSH, R1, 4);
    a.jmp_imm(BPF_JNE, R1, 4, "rules");
    a.alu64_imm(BPF_AND, R0, 0xf).alu64_imm(BPF_LSH, R0, 2); // R0 = header length
    a.jmp_imm(BPF_JLT, R0, 20, "rules");
    // R2 = DATA + off + hdr_len must not pass the end.
    a.mov64_reg(R2, DATA)
        .alu64_imm(BPF_ADD, R2, o)
        .alu64_reg(BPF_ADD, R2, R0);
    a.jmp_reg(BPF_JGT, R2, END, "rules");
    load16(a, R1, off + 2); // total length
    a.jmp_reg(BPF_JLT, R1, R0, "rules");
    a.ldx(BPF_B, R3, DATA, off + 9).stx(BPF_DW, R10, PROTO, R3);
    a.st(BPF_DW, R10, IPVER, 4);
    for (field, slot) in [(12, SRC), (16, DST)] {
        a.ldx(BPF_W, R4, DATA, off + field)
            .be(R4, 32)
            .stx(BPF_DW, R10, slot, R4);
    }
    // Non-first fragments carry no L4 header.
    load16(a, R4, off + 6);
    a.alu64_imm(BPF_AND, R4, 0x1fff).jmp_imm(BPF_JNE, R4, 0, "rules");
    a.jmp_imm(BPF_JEQ, R3, i32::from(IPPROTO_TCP), &format!("ports4_{off}"));
    a.jmp_imm(BPF_JNE, R3, i32::from(IPPROTO_UDP), "rules");
    a.label(format!("ports4_{off}"));
    // The ports must lie inside the IP packet (hdr_len + 4 ≤ total length) and the frame.
    a.mov64_reg(R4, R0)
        .alu64_imm(BPF_ADD, R4, 4)
        .jmp_reg(BPF_JGT, R4, R1, "rules");
    a.mov64_reg(R4, R2)
        .alu64_imm(BPF_ADD, R4, 4)
        .jmp_reg(BPF_JGT, R4, END, "rules");
    a.ldx(BPF_H, R0, R2, 0).be(R0, 16).stx(BPF_DW, R10, SPORT, R0);
    a.ldx(BPF_H, R0, R2, 2).be(R0, 16).stx(BPF_DW, R10, DPORT, R0);
    set_flag(a, HAS_PORTS);
    a.ja("rules");

    // IPv6: the fixed header; Next Header as it stands (extension headers are not walked).
    a.label(v6);
    a.jmp_imm(BPF_JNE, R9, i32::from(ETHERTYPE_IPV6), "rules");
    need(a, o + 40, "rules");
    a.ldx(BPF_B, R0, DATA, off).alu64_imm(BPF_RSH, R0, 4);
    a.jmp_imm(BPF_JNE, R0, 6, "rules");
    a.ldx(BPF_B, R3, DATA, off + 6).stx(BPF_DW, R10, PROTO, R3);
    a.st(BPF_DW, R10, IPVER, 6);
    for w in 0..4i16 {
        a.ldx(BPF_W, R4, DATA, off + 8 + 4 * w)
            .be(R4, 32)
            .stx(BPF_DW, R10, SRC + 8 * w, R4);
        a.ldx(BPF_W, R4, DATA, off + 24 + 4 * w)
            .be(R4, 32)
            .stx(BPF_DW, R10, DST + 8 * w, R4);
    }
    a.jmp_imm(BPF_JEQ, R3, i32::from(IPPROTO_TCP), &format!("ports6_{off}"));
    a.jmp_imm(BPF_JNE, R3, i32::from(IPPROTO_UDP), "rules");
    a.label(format!("ports6_{off}"));
    load16(a, R1, off + 4); // payload length
    a.jmp_imm(BPF_JLT, R1, 4, "rules");
    need(a, o + 44, "rules");
    load16(a, R0, off + 40);
    a.stx(BPF_DW, R10, SPORT, R0);
    load16(a, R0, off + 42);
    a.stx(BPF_DW, R10, DPORT, R0);
    set_flag(a, HAS_PORTS);
    a.ja("rules");
}

/// `if !(FLAGS & bit) goto fail`.
fn require_flag(a: &mut Asm, bit: i32, fail: &str) {
    a.ldx(BPF_DW, R0, R10, FLAGS)
        .alu64_imm(BPF_AND, R0, bit)
        .jmp_imm(BPF_JEQ, R0, 0, fail);
}

/// `if slot != value goto fail` for a small value.
fn require_eq(a: &mut Asm, slot: i16, value: i32, fail: &str) {
    a.ldx(BPF_DW, R0, R10, slot).jmp_imm(BPF_JNE, R0, value, fail);
}

/// Address words under a prefix mask: `if (slot[i] & mask[i]) != addr[i] goto fail`.
fn require_prefix(a: &mut Asm, slot: i16, addr: &[u8], mask: &[u8], fail: &str) {
    for (w, (addr, mask)) in addr.chunks(4).zip(mask.chunks(4)).enumerate() {
        let mask = u32::from_be_bytes(mask.try_into().unwrap());
        if mask == 0 {
            continue;
        }
        let addr = u32::from_be_bytes(addr.try_into().unwrap());
        a.ldx(BPF_DW, R0, R10, slot + 8 * w as i16)
            .alu32_imm(BPF_AND, R0, mask as i32)
            .jmp32_imm(BPF_JNE, R0, addr, fail);
    }
}

fn mac48(b: [u8; 6]) -> u64 {
    b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
}

fn compile_rule(a: &mut Asm, r: &FlowRule, fail: &str) {
    for (m, bit, slot) in [(r.dst_mac, HAS_DMAC, DMAC), (r.src_mac, HAS_SMAC, SMAC)] {
        if let Some(m) = m {
            require_flag(a, bit, fail);
            a.ldx(BPF_DW, R0, R10, slot)
                .ld_imm64(R1, mac48(m.mask()))
                .alu64_reg(BPF_AND, R0, R1)
                .ld_imm64(R1, mac48(m.addr()))
                .jmp_reg(BPF_JNE, R0, R1, fail);
        }
    }
    if let Some(vid) = r.vlan {
        require_flag(a, HAS_VLAN, fail);
        require_eq(a, TPID, i32::from(ETHERTYPE_VLAN), fail);
        a.ldx(BPF_DW, R0, R10, TCI)
            .alu64_imm(BPF_AND, R0, 0x0fff)
            .jmp_imm(BPF_JNE, R0, i32::from(vid), fail);
    }
    if let Some(t) = r.ethertype {
        require_flag(a, HAS_ETYPE, fail);
        require_eq(a, ETYPE, i32::from(t), fail);
    }
    match r.ip {
        None => {}
        Some(IpMatch::V4 { src, dst }) => {
            require_eq(a, IPVER, 4, fail);
            for (p, slot) in [(src, SRC), (dst, DST)] {
                if let Some(p) = p {
                    require_prefix(a, slot, &p.octets(), &p.mask(), fail);
                }
            }
        }
        Some(IpMatch::V6 { src, dst }) => {
            require_eq(a, IPVER, 6, fail);
            for (p, slot) in [(src, SRC), (dst, DST)] {
                if let Some(p) = p {
                    require_prefix(a, slot, &p.octets(), &p.mask(), fail);
                }
            }
        }
    }
    if let Some(proto) = r.ip_proto {
        a.ldx(BPF_DW, R0, R10, IPVER).jmp_imm(BPF_JEQ, R0, 0, fail);
        require_eq(a, PROTO, i32::from(proto), fail);
    }
    if r.src_port.is_some() || r.dst_port.is_some() {
        require_flag(a, HAS_PORTS, fail);
        if let Some(p) = r.src_port {
            require_eq(a, SPORT, i32::from(p), fail);
        }
        if let Some(p) = r.dst_port {
            require_eq(a, DPORT, i32::from(p), fail);
        }
    }
}

/// Compiles `rules` (validated and ordered as a [`RuleSet`] would) into an XDP program whose
/// verdict is `steal` for a frame some stealing rule matches and `XDP_PASS` otherwise. Copy
/// rules are left out (they never change that verdict); see the module documentation.
pub(crate) fn compile_xdp(rules: &[FlowRule], steal: StealAction) -> Result<Program, CompileError> {
    let mut set = RuleSet::new();
    for r in rules {
        set.add(r.clone()).map_err(CompileError::Rule)?;
    }
    let stealing: Vec<usize> = set
        .evaluation_order()
        .filter(|&i| set.rule(i).action == super::rule::Action::Steal)
        .collect();

    let mut a = Asm::new();
    a.mov64_reg(CTX, R1);
    a.ldx(BPF_W, DATA, CTX, 0).ldx(BPF_W, END, CTX, 4);
    for s in 1..=SLOTS {
        a.st(BPF_DW, R10, -8 * s, 0);
    }
    // Ethernet addresses, each only if the frame holds it.
    need(&mut a, 6, "rules");
    load_mac(&mut a, 0, DMAC);
    set_flag(&mut a, HAS_DMAC);
    need(&mut a, 12, "rules");
    load_mac(&mut a, 6, SMAC);
    set_flag(&mut a, HAS_SMAC);
    need(&mut a, 14, "rules");
    load16(&mut a, R9, 12);
    // Up to two tags; the outer one's TPID and TCI are kept.
    a.jmp_imm(BPF_JEQ, R9, i32::from(ETHERTYPE_VLAN), "tag_14");
    a.jmp_imm(BPF_JNE, R9, i32::from(ETHERTYPE_QINQ), "etype_14");
    a.label("tag_14");
    need(&mut a, 16, "rules");
    load16(&mut a, R0, 14);
    a.stx(BPF_DW, R10, TCI, R0).stx(BPF_DW, R10, TPID, R9);
    set_flag(&mut a, HAS_VLAN);
    need(&mut a, 18, "rules");
    load16(&mut a, R9, 16);
    a.jmp_imm(BPF_JEQ, R9, i32::from(ETHERTYPE_VLAN), "tag_18");
    a.jmp_imm(BPF_JNE, R9, i32::from(ETHERTYPE_QINQ), "etype_18");
    a.label("tag_18");
    need(&mut a, 22, "rules");
    load16(&mut a, R9, 20);
    a.ja("etype_22");
    // One L3 parse per header offset, so that every read has a constant offset.
    for off in [14i16, 18, 22] {
        a.label(format!("etype_{off}"));
        a.stx(BPF_DW, R10, ETYPE, R9);
        set_flag(&mut a, HAS_ETYPE);
        parse_l3(&mut a, off);
    }

    a.label("rules");
    let mut unconditional = false;
    for (n, &i) in stealing.iter().enumerate() {
        let fail = format!("rule_{n}_fail");
        let start = a.here();
        compile_rule(&mut a, set.rule(i), &fail);
        a.ja("steal");
        if a.here() == start + 1 {
            // A rule with no field (`any`) steals everything: what follows would be
            // unreachable, which the verifier refuses.
            unconditional = true;
            break;
        }
        a.label(fail);
    }
    if !unconditional {
        a.mov64_imm(R0, XDP_PASS as i32).exit();
    }
    // The verifier refuses unreachable instructions: emit the steal block only if used.
    if !stealing.is_empty() {
        a.label("steal");
        match steal {
            StealAction::Redirect => {
                a.ld_map_fd(R1)
                    .ldx(BPF_W, R2, CTX, 16) // ctx->rx_queue_index
                    .mov64_imm(R3, XDP_PASS as i32)
                    .call(HELPER_REDIRECT_MAP)
                    .exit();
            }
            #[cfg(test)]
            StealAction::Drop => {
                a.mov64_imm(R0, XDP_DROP as i32).exit();
            }
        }
    }
    a.finish().map_err(CompileError::Asm)
}

/// An `BPF_MAP_TYPE_XSKMAP`: queue index → AF_XDP socket.
pub(crate) struct XskMap {
    fd: OwnedFd,
}

impl XskMap {
    /// A map for `queues` receive queues, nothing bound.
    pub(crate) fn new(queues: u32) -> io::Result<XskMap> {
        crate::sys::bpf::create_xskmap(queues, "rawpkt_xsks").map(|fd| XskMap { fd })
    }

    pub(crate) fn fd(&self) -> &OwnedFd {
        &self.fd
    }
}

/// A loaded XDP program (not attached to any interface).
pub(crate) struct LoadedProgram {
    fd: OwnedFd,
}

impl LoadedProgram {
    /// Loads `prog`, resolving its map reference to `map` (required when the program redirects).
    /// A verifier rejection carries the verifier's log in the error.
    pub(crate) fn load(prog: &Program, map: Option<&XskMap>) -> io::Result<LoadedProgram> {
        let image = match (prog.needs_map(), map) {
            (true, Some(m)) => prog.with_map_fd(m.fd.as_raw_fd()).bytes(),
            (true, None) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the XDP program redirects to an XSKMAP but none was given",
                ))
            }
            (false, _) => prog.bytes(),
        };
        crate::sys::bpf::load_xdp(&image, "rawpkt_flow").map(|fd| LoadedProgram { fd })
    }

    pub(crate) fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// The program's verdict for `frame` received on queue 0 (`BPF_PROG_TEST_RUN`); frames
    /// shorter than 14 bytes are refused by the kernel.
    #[cfg(test)]
    pub(crate) fn test_run(&self, frame: &[u8]) -> io::Result<u32> {
        crate::sys::bpf::test_run(&self.fd, frame)
    }
}

// The assembler's and the XDP program's tests: unit tests, so that the assembler stays pub(crate).
#[cfg(test)]
mod tests;

// The XDP program against the software matcher on fuzzed frames and rule sets (root).
#[cfg(test)]
mod fuzz_bpf;
