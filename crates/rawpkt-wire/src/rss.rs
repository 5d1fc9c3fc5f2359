//! Toeplitz RSS hashing, as an mlx5 TIR computes it (`IBV_RX_HASH_FUNC_TOEPLITZ`, 40-byte key).

/// The default key DPDK ships and VPP uses for mlx5 (`rdma/device.c`).
pub const DEFAULT_KEY: [u8; 40] = [
    0x2c, 0xc6, 0x81, 0xd1, 0x5b, 0xdb, 0xf4, 0xf7, 0xfc, 0xa2, 0x83, 0x19, 0xdb, 0x1a, 0x3e, 0x94, 0x6b, 0x9e, 0x38,
    0xd9, 0x2c, 0x9c, 0x03, 0xd1, 0xad, 0x99, 0x44, 0xa7, 0xd9, 0x56, 0x3d, 0x59, 0x06, 0x3c, 0x25, 0xf3, 0xfc, 0x1f,
    0xdc, 0x2a,
];

/// Toeplitz hash of `input` (the selected header fields in network order) under `key`.
pub fn toeplitz(key: &[u8; 40], input: &[u8]) -> u32 {
    let mut hash = 0u32;
    let mut window = u32::from_be_bytes([key[0], key[1], key[2], key[3]]);
    for (i, byte) in input.iter().enumerate() {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                hash ^= window;
            }
            let next_bit_index = (i + 4) * 8 + bit;
            let next = key
                .get(next_bit_index / 8)
                .map_or(0, |k| (k >> (7 - next_bit_index % 8)) & 1);
            window = (window << 1) | u32::from(next);
        }
    }
    hash
}

/// Longest RSS input: IPv6 source and destination plus two ports.
pub const MAX_INPUT: usize = 36;

/// Toeplitz by table: for every input byte position and value, the XOR of the 32-bit key
/// windows its set bits select, so a hash costs one lookup per input byte instead of eight
/// shift-and-test steps (the usual software RSS technique; 36 KiB per key).
pub struct ToeplitzTable {
    table: Box<[[u32; 256]; MAX_INPUT]>,
}

impl ToeplitzTable {
    pub fn new(key: &[u8; 40]) -> ToeplitzTable {
        let mut table = Box::new([[0u32; 256]; MAX_INPUT]);
        for (pos, row) in table.iter_mut().enumerate() {
            for bit in 0..8 {
                // The key window that input bit (pos, bit) selects: key bits [i, i + 32).
                let i = pos * 8 + bit;
                let mut window = 0u32;
                for k in 0..32 {
                    let kb = i + k;
                    window = window << 1 | u32::from((key[kb / 8] >> (7 - kb % 8)) & 1);
                }
                for (v, slot) in row.iter_mut().enumerate() {
                    if v & (0x80 >> bit) != 0 {
                        *slot ^= window;
                    }
                }
            }
        }
        ToeplitzTable { table }
    }

    #[inline]
    pub fn hash(&self, input: &[u8]) -> u32 {
        input
            .iter()
            .zip(self.table.iter())
            .fold(0, |h, (&b, row)| h ^ row[usize::from(b)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Microsoft's RSS verification suite key and vectors (the "Verifying the RSS Hash
    /// Calculation" table), which every NIC implementing Toeplitz reproduces.
    const MS_KEY: [u8; 40] = [
        0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca,
        0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b,
        0xbe, 0xac, 0x01, 0xfa,
    ];

    fn v4(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> ([u8; 8], [u8; 12]) {
        let mut ip = [0u8; 8];
        ip[..4].copy_from_slice(&src);
        ip[4..].copy_from_slice(&dst);
        let mut l4 = [0u8; 12];
        l4[..8].copy_from_slice(&ip);
        l4[8..10].copy_from_slice(&sport.to_be_bytes());
        l4[10..].copy_from_slice(&dport.to_be_bytes());
        (ip, l4)
    }

    #[test]
    fn table_agrees_with_the_bitwise_definition() {
        for key in [MS_KEY, DEFAULT_KEY] {
            let t = ToeplitzTable::new(&key);
            let mut x = 0x1234_5678_9abc_def0u64;
            for len in 0..=MAX_INPUT {
                let input: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                assert_eq!(t.hash(&input), toeplitz(&key, &input), "len {len}");
            }
        }
        let (_, l4) = v4([66, 9, 149, 187], [161, 142, 100, 80], 2794, 1766);
        assert_eq!(ToeplitzTable::new(&MS_KEY).hash(&l4), 0x51ccc178);
    }

    #[test]
    fn microsoft_vectors() {
        let (ip, l4) = v4([66, 9, 149, 187], [161, 142, 100, 80], 2794, 1766);
        assert_eq!(toeplitz(&MS_KEY, &ip), 0x323e8fc2);
        assert_eq!(toeplitz(&MS_KEY, &l4), 0x51ccc178);
        let (ip, l4) = v4([199, 92, 111, 2], [65, 69, 140, 83], 14230, 4739);
        assert_eq!(toeplitz(&MS_KEY, &ip), 0xd718262a);
        assert_eq!(toeplitz(&MS_KEY, &l4), 0xc626b0ea);
    }
}
