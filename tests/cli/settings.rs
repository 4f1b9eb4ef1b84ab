//! Where the command line finds its server and token: a flag beats the environment, which
//! beats the profile file (whose `default` or `--profile` picks a profile); with none of them
//! the error names all three. Which setting won shows in whether the run reached the live
//! server (a URL that goes nowhere, a token it refuses, lose).

use taskmesh_testkit::Server;

use super::{Cli, ALICE, AUTH, TASKMESH};

#[test]
fn a_flag_beats_the_environment_which_beats_the_profile() {
    let s = Server::start(TASKMESH, AUTH);
    let port = taskmesh_testkit::free_ports(1)[0];
    let nowhere = format!("http://127.0.0.1:{port}/mcp");
    let profiles = format!(
        "default = \"live\"\n\
         [profiles.live]\nurl = \"{live}\"\ntoken = \"{ALICE}\"\n\
         [profiles.dead]\nurl = \"{nowhere}\"\ntoken = \"wrong-token-1\"\n",
        live = s.url
    );

    // The default profile alone: its URL and token.
    let cli = Cli::new().profiles(&profiles);
    let r = cli.ok(&["tools", "--json"]);
    assert!(r.json()["tools"].is_array());

    // --profile picks another: its URL goes nowhere.
    assert_eq!(cli.run(&["tools", "--profile", "dead"]).code, 2);
    // ... and TASKMESH_PROFILE does the same.
    let by_env = Cli::new()
        .profiles(&profiles)
        .with("TASKMESH_PROFILE", "dead");
    assert_eq!(by_env.run(&["tools"]).code, 2);
    // A flag over the picked profile's URL and token.
    by_env.ok(&["tools", "--url", &s.url, "--token", ALICE]);

    // The environment beats the profile: a URL that goes nowhere, then a token refused.
    let env_url = Cli::new()
        .profiles(&profiles)
        .with("TASKMESH_URL", &nowhere);
    let r = env_url.run(&["tools"]);
    assert_eq!(r.code, 2, "{r:?}");
    let env_token = Cli::new()
        .profiles(&profiles)
        .with("TASKMESH_TOKEN", "wrong-token-1");
    let r = env_token.run(&["tools"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("401"), "the token is refused: {r:?}");

    // A flag beats the environment.
    env_url.ok(&["tools", "--url", &s.url]);
    env_token.ok(&["tools", "--token", ALICE]);

    // TASKMESH_PROFILES moves the file.
    let elsewhere = Cli::new();
    let file = elsewhere.home().join("elsewhere.toml");
    std::fs::write(&file, &profiles).unwrap();
    let elsewhere = elsewhere.with("TASKMESH_PROFILES", &file.display().to_string());
    elsewhere.ok(&["tools"]);

    // A profile that is not in the file is an error that names it.
    let r = cli.run(&["tools", "--profile", "nope"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("\"nope\""), "{r:?}");
}

#[test]
fn a_missing_url_names_the_three_ways_to_give_one() {
    let cli = Cli::new();
    let r = cli.run(&["tools"]);
    assert_eq!(r.code, 2, "{r:?}");
    let file = cli.profile_file().display().to_string();
    for way in ["--url", "TASKMESH_URL", file.as_str()] {
        assert!(r.stderr.contains(way), "{way} missing from {r:?}");
    }
    // XDG_CONFIG_HOME moves the default file.
    let xdg = Cli::new();
    let dir = xdg.home().join("xdg");
    let xdg = xdg.with("XDG_CONFIG_HOME", &dir.display().to_string());
    let r = xdg.run(&["call", "greet", "name=x"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .contains(&dir.join("taskmesh/profiles.toml").display().to_string()),
        "{r:?}"
    );
}
