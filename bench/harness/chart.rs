//! The throughput chart as a PNG, drawn and encoded here: no plotting
//! library is among Weir's dependencies, and a bar chart needs little. The
//! image is palette-indexed; the encoder writes fixed-Huffman deflate with
//! run-length matches (distance 1), which is plenty for flat colours.

use std::path::Path;

use anyhow::Result;

use crate::ceiling::Ceiling;
use crate::run::Outcome;

const WHITE: u8 = 0;
const BLACK: u8 = 1;
const GRAY: u8 = 2;
const PALETTE: [[u8; 3]; 8] = [
    [255, 255, 255],
    [20, 20, 20],
    [200, 200, 200],
    [130, 130, 130], // raw loop
    [240, 140, 40],  // Weir 1t
    [190, 80, 0],    // Weir 2t
    [80, 140, 220],  // Kafka Streams 1t
    [20, 70, 150],   // Kafka Streams 2t
];

fn colour(o: &Outcome) -> u8 {
    match (o.kind.as_str(), o.threads) {
        ("raw", _) => 3,
        ("weir", 1) => 4,
        ("weir", _) => 5,
        ("kstreams", 1) => 6,
        _ => 7,
    }
}

/// A 5×7 glyph: seven rows of five bits.
fn glyph(c: char) -> [u8; 7] {
    let rows: [&str; 7] = match c.to_ascii_uppercase() {
        'A' => [
            "01110", "10001", "10001", "11111", "10001", "10001", "10001",
        ],
        'B' => [
            "11110", "10001", "10001", "11110", "10001", "10001", "11110",
        ],
        'C' => [
            "01110", "10001", "10000", "10000", "10000", "10001", "01110",
        ],
        'D' => [
            "11110", "10001", "10001", "10001", "10001", "10001", "11110",
        ],
        'E' => [
            "11111", "10000", "10000", "11110", "10000", "10000", "11111",
        ],
        'F' => [
            "11111", "10000", "10000", "11110", "10000", "10000", "10000",
        ],
        'G' => [
            "01110", "10001", "10000", "10111", "10001", "10001", "01111",
        ],
        'H' => [
            "10001", "10001", "10001", "11111", "10001", "10001", "10001",
        ],
        'I' => [
            "01110", "00100", "00100", "00100", "00100", "00100", "01110",
        ],
        'J' => [
            "00111", "00010", "00010", "00010", "00010", "10010", "01100",
        ],
        'K' => [
            "10001", "10010", "10100", "11000", "10100", "10010", "10001",
        ],
        'L' => [
            "10000", "10000", "10000", "10000", "10000", "10000", "11111",
        ],
        'M' => [
            "10001", "11011", "10101", "10101", "10001", "10001", "10001",
        ],
        'N' => [
            "10001", "10001", "11001", "10101", "10011", "10001", "10001",
        ],
        'O' => [
            "01110", "10001", "10001", "10001", "10001", "10001", "01110",
        ],
        'P' => [
            "11110", "10001", "10001", "11110", "10000", "10000", "10000",
        ],
        'Q' => [
            "01110", "10001", "10001", "10001", "10101", "10010", "01101",
        ],
        'R' => [
            "11110", "10001", "10001", "11110", "10100", "10010", "10001",
        ],
        'S' => [
            "01111", "10000", "10000", "01110", "00001", "00001", "11110",
        ],
        'T' => [
            "11111", "00100", "00100", "00100", "00100", "00100", "00100",
        ],
        'U' => [
            "10001", "10001", "10001", "10001", "10001", "10001", "01110",
        ],
        'V' => [
            "10001", "10001", "10001", "10001", "10001", "01010", "00100",
        ],
        'W' => [
            "10001", "10001", "10001", "10101", "10101", "10101", "01010",
        ],
        'X' => [
            "10001", "10001", "01010", "00100", "01010", "10001", "10001",
        ],
        'Y' => [
            "10001", "10001", "01010", "00100", "00100", "00100", "00100",
        ],
        'Z' => [
            "11111", "00001", "00010", "00100", "01000", "10000", "11111",
        ],
        '0' => [
            "01110", "10001", "10011", "10101", "11001", "10001", "01110",
        ],
        '1' => [
            "00100", "01100", "00100", "00100", "00100", "00100", "01110",
        ],
        '2' => [
            "01110", "10001", "00001", "00010", "00100", "01000", "11111",
        ],
        '3' => [
            "11111", "00010", "00100", "00010", "00001", "10001", "01110",
        ],
        '4' => [
            "00010", "00110", "01010", "10010", "11111", "00010", "00010",
        ],
        '5' => [
            "11111", "10000", "11110", "00001", "00001", "10001", "01110",
        ],
        '6' => [
            "00110", "01000", "10000", "11110", "10001", "10001", "01110",
        ],
        '7' => [
            "11111", "00001", "00010", "00100", "01000", "01000", "01000",
        ],
        '8' => [
            "01110", "10001", "10001", "01110", "10001", "10001", "01110",
        ],
        '9' => [
            "01110", "10001", "10001", "01111", "00001", "00010", "01100",
        ],
        '.' => [
            "00000", "00000", "00000", "00000", "00000", "01100", "01100",
        ],
        ',' => [
            "00000", "00000", "00000", "00000", "01100", "00100", "01000",
        ],
        '-' => [
            "00000", "00000", "00000", "11111", "00000", "00000", "00000",
        ],
        '/' => [
            "00000", "00001", "00010", "00100", "01000", "10000", "00000",
        ],
        ':' => [
            "00000", "01100", "01100", "00000", "01100", "01100", "00000",
        ],
        '(' => [
            "00010", "00100", "01000", "01000", "01000", "00100", "00010",
        ],
        ')' => [
            "01000", "00100", "00010", "00010", "00010", "00100", "01000",
        ],
        '_' => [
            "00000", "00000", "00000", "00000", "00000", "00000", "11111",
        ],
        '%' => [
            "11000", "11001", "00010", "00100", "01000", "10011", "00011",
        ],
        _ => ["00000"; 7],
    };
    rows.map(|r| u8::from_str_radix(r, 2).unwrap_or(0))
}

struct Canvas {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Canvas {
    fn rect(&mut self, x: usize, y: usize, w: usize, h: usize, c: u8) {
        for yy in y..(y + h).min(self.h) {
            for xx in x..(x + w).min(self.w) {
                self.px[yy * self.w + xx] = c;
            }
        }
    }

    /// Draws `text` with its top-left corner at (x, y), `scale` pixels per font dot.
    fn text(&mut self, x: usize, y: usize, text: &str, scale: usize, c: u8) {
        for (i, ch) in text.chars().enumerate() {
            let g = glyph(ch);
            let gx = x + i * 6 * scale;
            for (row, bits) in g.iter().enumerate() {
                for col in 0..5 {
                    if bits & (0x10 >> col) != 0 {
                        self.rect(gx + col * scale, y + row * scale, scale, scale, c);
                    }
                }
            }
        }
    }
}

/// One bar of a chart: its label, its value (`None`: the run failed) and
/// its palette colour.
pub struct Bar {
    pub label: String,
    pub value: Option<f64>,
    pub colour: u8,
}

/// Palette colours for other charts of the report.
pub const WEIR: u8 = 4;
/// See [`WEIR`].
pub const WEIR_DARK: u8 = 5;
/// See [`WEIR`].
pub const KSTREAMS: u8 = 6;
/// See [`WEIR`].
pub const KSTREAMS_DARK: u8 = 7;

/// Writes a horizontal bar chart of every run's throughput, after the
/// broker-only ceiling's two halves when it was measured.
pub fn write(path: &Path, outcomes: &[Outcome], ceiling: Option<Ceiling>) -> Result<()> {
    let mut groups: Vec<(String, Vec<Bar>)> = Vec::new();
    if let Some(c) = ceiling {
        let half = |label: &str, value| Bar {
            label: label.to_string(),
            value: Some(value),
            colour: 3,
        };
        groups.push((
            "broker-only ceiling".to_string(),
            vec![
                half("produce-only", c.produce),
                half("consume-only", c.consume),
            ],
        ));
    }
    for o in outcomes {
        let g = format!("{} {}", o.workload, o.guarantee);
        let bar = Bar {
            label: o.system.clone(),
            value: o.error.is_none().then_some(o.throughput),
            colour: colour(o),
        };
        match groups.iter_mut().find(|(name, _)| *name == g) {
            Some((_, v)) => v.push(bar),
            None => groups.push((g, vec![bar])),
        }
    }
    bars(
        path,
        "throughput, records/s (higher is better)",
        &groups,
        |v| format!("{v:.0}"),
    )
}

/// Writes a horizontal bar chart: a title, then each group's name and its
/// bars, scaled to the largest value; `label` prints a bar's value.
pub fn bars(
    path: &Path,
    title: &str,
    groups: &[(String, Vec<Bar>)],
    label: impl Fn(f64) -> String,
) -> Result<()> {
    let (scale, row, gap, left, width) = (2usize, 18usize, 26usize, 250usize, 1100usize);
    let height = 60
        + groups
            .iter()
            .map(|(_, v)| gap + v.len() * row)
            .sum::<usize>()
        + 20;
    let mut c = Canvas {
        w: width,
        h: height,
        px: vec![WHITE; width * height],
    };
    c.text(10, 10, title, 3, BLACK);
    let max = groups
        .iter()
        .flat_map(|(_, v)| v.iter().filter_map(|b| b.value))
        .fold(f64::MIN_POSITIVE, f64::max);
    let bar_max = (width - left - 150) as f64;
    let mut y = 60;
    for (name, bars) in groups {
        c.text(10, y + 4, name, scale, BLACK);
        c.rect(10, y + gap - 6, width - 20, 1, GRAY);
        y += gap;
        for b in bars {
            c.text(30, y + 2, &b.label, scale, BLACK);
            match b.value {
                None => c.text(left, y + 2, "failed", scale, BLACK),
                Some(v) => {
                    let len = ((v / max) * bar_max).round().max(1.0) as usize;
                    c.rect(left, y, len, row - 4, b.colour);
                    c.text(left + len + 8, y + 2, &label(v), scale, BLACK);
                }
            }
            y += row;
        }
    }
    std::fs::write(path, encode(&c))?;
    Ok(())
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

struct Bits {
    out: Vec<u8>,
    acc: u32,
    n: u32,
}

impl Bits {
    /// Writes the low `n` bits of `v`, least significant first.
    fn put(&mut self, v: u32, n: u32) {
        self.acc |= v << self.n;
        self.n += n;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// Writes a Huffman code (most significant bit first).
    fn code(&mut self, code: u32, len: u32) {
        let rev = code.reverse_bits() >> (32 - len);
        self.put(rev, len);
    }

    fn literal(&mut self, v: u32) {
        match v {
            0..=143 => self.code(0x30 + v, 8),
            144..=255 => self.code(0x190 + v - 144, 9),
            256..=279 => self.code(v - 256, 7),
            _ => self.code(0xC0 + v - 280, 8),
        }
    }
}

const LEN_BASE: [u32; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
const LEN_EXTRA: [u32; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];

/// zlib stream: one fixed-Huffman block, runs as distance-1 matches.
fn deflate(data: &[u8]) -> Vec<u8> {
    let mut b = Bits {
        out: vec![0x78, 0x01],
        acc: 0,
        n: 0,
    };
    b.put(1, 1); // final block
    b.put(1, 2); // fixed Huffman
    let mut i = 0;
    while i < data.len() {
        let mut run = 0;
        if i > 0 {
            while run < 258 && i + run < data.len() && data[i + run] == data[i - 1] {
                run += 1;
            }
        }
        if run >= 3 {
            let idx = LEN_BASE
                .iter()
                .rposition(|&base| base as usize <= run)
                .unwrap_or(0);
            b.literal(257 + idx as u32);
            b.put(run as u32 - LEN_BASE[idx], LEN_EXTRA[idx]);
            b.code(0, 5); // distance code 0: distance 1
            i += run;
        } else {
            b.literal(data[i] as u32);
            i += 1;
        }
    }
    b.literal(256);
    if b.n > 0 {
        b.out.push(b.acc as u8);
    }
    let (mut s1, mut s2) = (1u32, 0u32);
    for &x in data {
        s1 = (s1 + x as u32) % 65521;
        s2 = (s2 + s1) % 65521;
    }
    b.out.extend_from_slice(&((s2 << 16) | s1).to_be_bytes());
    b.out
}

fn encode(c: &Canvas) -> Vec<u8> {
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&(c.w as u32).to_be_bytes());
    ihdr.extend_from_slice(&(c.h as u32).to_be_bytes());
    ihdr.extend_from_slice(&[8, 3, 0, 0, 0]); // 8-bit palette indices
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"PLTE", &PALETTE.concat());
    let mut raw = Vec::with_capacity((c.w + 1) * c.h);
    for row in c.px.chunks(c.w) {
        raw.push(0);
        raw.extend_from_slice(row);
    }
    chunk(&mut out, b"IDAT", &deflate(&raw));
    chunk(&mut out, b"IEND", &[]);
    out
}
