//! The demo's report (issue 56): from a `demo.json` as `weft-bench demo`
//! writes it, `bench/demo_report.py` draws three PNGs and one
//! self-contained `report.html`. Checked without a browser: the page
//! holds every PNG inline (no file beside it is needed), the roles and the
//! speed table; each PNG is a real image of the expected size whose pixels
//! show the plot (the speed plot has bars in each relay's colour, the
//! node-delay plot its bars), not a blank canvas.

use std::path::PathBuf;
use std::process::Command;

use weft_bench::demo::{roles::RoleCheck, roles::RolesReport, DemoResult, SpeedRow};

fn row(label: &str, mib_s: f64, cost: f64, weft: bool) -> SpeedRow {
    SpeedRow {
        label: label.into(),
        mib_s,
        cpu_s_per_gib: cost,
        delay_up_ms: (2.0, 40.0),
        delay_down_ms: (3.0, 50.0),
        corrupt_cells: 0,
        samples: (0..14)
            .map(|i| (0.5 * i as f64, mib_s + i as f64))
            .collect(),
        node_delay_buckets_ms: if weft {
            vec![
                (0.512, 10.0),
                (1.024, 500.0),
                (2.048, 900.0),
                (4.096, 990.0),
                (f64::INFINITY, 1000.0),
            ]
        } else {
            Vec::new()
        },
    }
}

fn sample() -> DemoResult {
    DemoResult {
        date: "2026-12-07T04:00:00Z".into(),
        machine: weft_bench::report::Machine::read(),
        tor_version: "Tor version 0.4.9.11".into(),
        roles: Some(RolesReport {
            tor_version: "Tor version 0.4.9.11".into(),
            checks: vec![
                RoleCheck {
                    role: "middle".into(),
                    ok: true,
                    checked: "4 MiB each way, SHA-256 matched <&>".into(),
                },
                RoleCheck {
                    role: "directory cache".into(),
                    ok: false,
                    checked: "FAILED: timed out".into(),
                },
            ],
            node_delay_buckets_ms: vec![(1.024, 5.0), (2.048, 8.0), (f64::INFINITY, 8.0)],
            ready_s: 30.0,
            total_s: 90.0,
        }),
        cpu_quota: 0.5,
        speed: vec![
            row("tor", 95.0, 5.4, false),
            row("weft-1", 310.0, 1.6, true),
            row("weft-2", 300.0, 1.7, true),
        ],
    }
}

/// PNG width and height from its IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&bytes[12..16], b"IHDR");
    let n = |i: usize| u32::from_be_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    (n(16), n(20))
}

/// Pixels of `png` within 12 of colour `hex` (per channel), via
/// matplotlib's reader.
fn pixels_of(png: &std::path::Path, hex: &str) -> usize {
    let rgb: Vec<u8> = (0..3)
        .map(|i| u8::from_str_radix(&hex[1 + 2 * i..3 + 2 * i], 16).unwrap())
        .collect();
    let code = format!(
        "import matplotlib.image as m, numpy as n; a = m.imread('{}')[:, :, :3] * 255; \
         print(int((n.abs(a - n.array({:?})) <= 12).all(axis=2).sum()))",
        png.display(),
        rgb
    );
    let o = Command::new("python3")
        .args(["-c", &code])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
}

#[test]
fn the_report_is_one_page_with_its_plots_inline() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("demo-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("demo.json");
    weft_bench::report::write_json(&json, &sample()).unwrap();
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let html = weft_bench::demo::write_report(&repo, &json, &dir).unwrap();
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(
        page.matches("src=\"data:image/png;base64,").count(),
        3,
        "three inline PNGs"
    );
    assert!(
        !page.contains("src=\"speed.png\""),
        "nothing outside the page"
    );
    assert!(
        page.contains("SHA-256 matched &lt;&amp;&gt;"),
        "escaped role line"
    );
    assert!(page.contains("<td>FAIL</td><td>directory cache</td>"));
    assert!(page.contains("<td>weft-1</td><td>310.0</td><td>3.26x</td>"));
    for (name, colours) in [
        ("speed.png", &["#7d4698", "#2a9d8f", "#e76f51"][..]),
        ("throughput.png", &["#7d4698", "#2a9d8f", "#e76f51"][..]),
        ("node_delay.png", &["#264653", "#2a9d8f", "#e76f51"][..]),
    ] {
        let p = dir.join(name);
        let bytes = std::fs::read(&p).unwrap();
        assert!(bytes.len() > 10_000, "{name}: {} bytes", bytes.len());
        let (w, h) = png_size(&bytes);
        assert!(w >= 900 && h >= 300, "{name}: {w}x{h}");
        for c in colours {
            let n = pixels_of(&p, c);
            assert!(n > 200, "{name}: {n} pixels of {c}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
