use super::*;

const SAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn a_traceparent_is_read_and_written_back_unchanged() {
    let cx = parse(SAMPLED).expect("valid");
    assert!(cx.is_sampled());
    assert!(cx.is_remote());
    assert_eq!(format(&cx), SAMPLED);
    let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
    let cx = parse(unsampled).expect("valid");
    assert!(!cx.is_sampled());
    assert_eq!(format(&cx), unsampled);
}

#[test]
fn a_later_version_is_read_by_its_first_four_fields() {
    let cx = parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-what-comes-next")
        .expect("a later version with more fields");
    assert!(cx.is_sampled());
    // Only the sampled bit is kept; the version written is ours.
    assert_eq!(format(&cx), SAMPLED);
}

#[test]
fn a_malformed_traceparent_is_ignored() {
    for bad in [
        "",
        "00",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
    ] {
        assert!(parse(bad).is_none(), "{bad:?} was accepted");
    }
}

#[test]
fn settings_out_of_range_are_refused_by_name() {
    let ok = TracingConfig {
        otlp_endpoint: Some("http://127.0.0.1:4318".into()),
        ..TracingConfig::default()
    };
    ok.validate().expect("valid");
    assert_eq!(
        ok.traces_url().as_deref(),
        Some("http://127.0.0.1:4318/v1/traces")
    );
    let cases: Vec<(TracingConfig, &str)> = vec![
        (
            TracingConfig {
                sample_ratio: 1.5,
                ..ok.clone()
            },
            "sample_ratio",
        ),
        (
            TracingConfig {
                sample_ratio: f64::NAN,
                ..ok.clone()
            },
            "sample_ratio",
        ),
        (
            TracingConfig {
                otlp_endpoint: Some("https://collector:4318".into()),
                ..ok.clone()
            },
            "otlp_endpoint",
        ),
        (
            TracingConfig {
                otlp_endpoint: Some("127.0.0.1:4318".into()),
                ..ok.clone()
            },
            "otlp_endpoint",
        ),
        (
            TracingConfig {
                service_name: String::new(),
                ..ok.clone()
            },
            "service_name",
        ),
        (
            TracingConfig {
                max_queue_spans: 0,
                ..ok.clone()
            },
            "max_queue_spans",
        ),
        (
            TracingConfig {
                max_export_batch_spans: 10_000,
                ..ok.clone()
            },
            "max_export_batch_spans",
        ),
    ];
    for (cfg, setting) in cases {
        let e = cfg.validate().expect_err(setting).to_string();
        assert!(e.contains(setting), "{e}");
    }
}

#[tokio::test]
async fn without_an_exporter_nothing_is_sampled_or_carried() {
    // No test in this binary installs an exporter.
    assert!(!enabled());
    assert!(decide(Some(SAMPLED)).is_none());
    assert!(decide(None).is_none());
    assert!(Span::start("x", SpanKind::Server, None, Vec::new()).is_none());
    let described = std::cell::Cell::new(false);
    let span = Span::start_under(SpanKind::Server, Some(SAMPLED), || {
        described.set(true);
        ("x", Vec::new())
    });
    assert!(span.is_none());
    assert!(!described.get(), "an untraced call builds nothing");
    let parent = parse(SAMPLED);
    let inside = scope(parent, async { current_traceparent() }).await;
    assert_eq!(inside.as_deref(), Some(SAMPLED));
    assert!(current().is_none());
}

#[test]
fn draws_spread_over_the_range() {
    // A ratio of 1/4 must take about a quarter: far from none and from all.
    let below = (0..4_000).filter(|_| draw() < u64::MAX / 4).count();
    assert!(
        (700..1_300).contains(&below),
        "{below} of 4000 below a quarter"
    );
}
