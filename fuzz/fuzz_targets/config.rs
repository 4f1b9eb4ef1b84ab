//! Any configuration text and environment: the loader accepts it or says why, never panics.
//! The input is the file's text, then after a NUL byte `NAME=value` lines of `TASKMESH_*`
//! variables.
#![no_main]

use libfuzzer_sys::fuzz_target;
use taskmesh_node::config::{Config, Overrides};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (file, env) = text.split_once('\0').unwrap_or((text, ""));
    let env: Vec<(String, String)> = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (format!("TASKMESH_{k}"), v.to_string()))
        .collect();
    if let Ok(cfg) = Config::parse(Some(file), "fuzz.toml", env, Overrides::default()) {
        // An accepted configuration holds what validation promises.
        assert!(cfg.shards.is_power_of_two());
    }
});
