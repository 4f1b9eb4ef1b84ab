//! The checks of access tokens, with a key set read from a file. The key pair is the first
//! Ed25519 test vector of RFC 8032 (a published test key, never a secret).

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;

use super::*;

const SEED: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
const PUBLIC: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
const ISSUER: &str = "https://issuer.test";
const RESOURCE: &str = "https://mcp.test/mcp";

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn signing_key() -> EncodingKey {
    // PKCS#8 v1 wrapping of an Ed25519 seed.
    let mut der = hex("302e020100300506032b657004220420");
    der.extend(hex(SEED));
    EncodingKey::from_ed_der(&der)
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn token(kid: &str, claims: serde_json::Value) -> String {
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, &claims, &signing_key()).unwrap()
}

fn good_claims() -> serde_json::Value {
    json!({"iss": ISSUER, "aud": RESOURCE, "sub": "client-1", "exp": now_s() + 600,
           "scope": "tasks:read tasks:create"})
}

/// An authenticator trusting [`ISSUER`] with the test key (kid `k1`) in a JWKS file, plus one
/// shared-secret key (kid `oct`) that must never be used.
fn authenticator(dir: &tempfile::TempDir, change: impl FnOnce(&mut AuthConfig)) -> Authenticator {
    let cfg = test_config(dir, change);
    cfg.validate().unwrap();
    Authenticator::new(&cfg)
}

/// The settings of [`authenticator`], not validated.
fn test_config(dir: &tempfile::TempDir, change: impl FnOnce(&mut AuthConfig)) -> AuthConfig {
    let jwks = dir.path().join("jwks.json");
    std::fs::write(
        &jwks,
        json!({"keys": [
            {"kty": "OKP", "crv": "Ed25519", "x": b64(&hex(PUBLIC)), "kid": "k1", "alg": "EdDSA", "use": "sig"},
            {"kty": "oct", "k": b64(b"a-shared-secret-that-is-public!!"), "kid": "oct", "alg": "HS256"},
        ]})
        .to_string(),
    )
    .unwrap();
    let mut cfg = AuthConfig {
        resource: Some(RESOURCE.into()),
        issuers: vec![IssuerConfig {
            issuer: ISSUER.into(),
            jwks_url: None,
            jwks_file: Some(jwks),
            jwks_refresh_ms: 300_000,
            algorithms: vec!["EdDSA".into(), "RS256".into()],
            introspection_url: None,
            introspection_client_id: None,
            introspection_client_secret: None,
        }],
        leeway_s: 0,
        scopes: ScopeConfig {
            create: vec!["tasks:create".into()],
            read: vec!["tasks:read".into()],
            cancel: vec!["tasks:cancel".into()],
            list: vec![],
        },
        ..AuthConfig::default()
    };
    change(&mut cfg);
    cfg
}

fn bearer(t: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("Bearer {t}")).unwrap()
}

#[tokio::test]
async fn a_token_of_a_trusted_issuer_for_this_resource_names_its_principal_and_scopes() {
    let dir = tempfile::tempdir().unwrap();
    let auth = authenticator(&dir, |_| {});
    let id = auth
        .authenticate(Some(&bearer(&token("k1", good_claims()))))
        .await
        .unwrap();
    assert_eq!(id.principal, "client-1");
    assert_eq!(id.issuer.as_deref(), Some(ISSUER));
    assert!(auth.missing_scopes(&id, Operation::Read).is_empty());
    assert!(auth.missing_scopes(&id, Operation::Create).is_empty());
    assert_eq!(
        auth.missing_scopes(&id, Operation::Cancel),
        vec!["tasks:cancel"]
    );
    assert!(auth.missing_scopes(&id, Operation::List).is_empty());
    // The scheme is case-insensitive.
    let lower = HeaderValue::from_str(&format!("bearer {}", token("k1", good_claims()))).unwrap();
    assert!(auth.authenticate(Some(&lower)).await.is_ok());
}

#[tokio::test]
async fn the_principal_may_carry_its_issuer_and_come_from_another_claim() {
    let dir = tempfile::tempdir().unwrap();
    let auth = authenticator(&dir, |c| {
        c.principal_with_issuer = true;
        c.principal_claim = "client_id".into();
    });
    let mut claims = good_claims();
    claims["client_id"] = json!("cid-9");
    let id = auth
        .authenticate(Some(&bearer(&token("k1", claims))))
        .await
        .unwrap();
    assert_eq!(id.principal, format!("{ISSUER}#cid-9"));
    // Without the claim the token names no principal.
    let err = auth
        .authenticate(Some(&bearer(&token("k1", good_claims()))))
        .await
        .unwrap_err();
    assert!(matches!(err, Refusal::Invalid(_)), "{err:?}");
}

#[tokio::test]
async fn tokens_that_are_not_for_here_or_not_valid_now_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let auth = authenticator(&dir, |_| {});
    let with = |change: &dyn Fn(&mut serde_json::Value)| {
        let mut c = good_claims();
        change(&mut c);
        token("k1", c)
    };
    let cases = [
        (
            "another audience",
            with(&|c| c["aud"] = json!("https://other.test/mcp")),
        ),
        (
            "no audience",
            with(&|c| {
                c.as_object_mut().unwrap().remove("aud");
            }),
        ),
        ("expired", with(&|c| c["exp"] = json!(now_s() - 5))),
        ("not yet valid", with(&|c| c["nbf"] = json!(now_s() + 300))),
        (
            "no expiry",
            with(&|c| {
                c.as_object_mut().unwrap().remove("exp");
            }),
        ),
        (
            "unknown issuer",
            with(&|c| c["iss"] = json!("https://rogue.test")),
        ),
        ("unknown key id", token("k2", good_claims())),
    ];
    for (what, t) in cases {
        let err = auth.authenticate(Some(&bearer(&t))).await.unwrap_err();
        assert!(matches!(err, Refusal::Invalid(_)), "{what}: {err:?}");
    }
    // A list audience naming this resource is fine.
    let t = with(&|c| c["aud"] = json!(["https://other.test", RESOURCE]));
    assert!(auth.authenticate(Some(&bearer(&t))).await.is_ok());
}

#[tokio::test]
async fn unsigned_tampered_and_shared_secret_tokens_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    // The settings refuse HS256; even past them, the key set's shared secret is never used.
    let cfg = test_config(&dir, |c| c.issuers[0].algorithms.push("HS256".into()));
    assert!(cfg.validate().is_err());
    let auth = Authenticator::new(&cfg);
    // alg none, no signature.
    let none = format!(
        "{}.{}.",
        b64(br#"{"alg":"none","typ":"JWT"}"#),
        b64(good_claims().to_string().as_bytes())
    );
    // A valid token whose payload was changed (another subject).
    let good = token("k1", good_claims());
    let parts: Vec<&str> = good.split('.').collect();
    let mut claims = good_claims();
    claims["sub"] = json!("someone-else");
    let tampered = format!(
        "{}.{}.{}",
        parts[0],
        b64(claims.to_string().as_bytes()),
        parts[2]
    );
    // HS256 signed with the shared secret the key set (wrongly) publishes.
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("oct".into());
    let hs = jsonwebtoken::encode(
        &header,
        &good_claims(),
        &EncodingKey::from_secret(b"a-shared-secret-that-is-public!!").unwrap(),
    )
    .unwrap();
    for (what, t) in [
        ("none", none),
        ("tampered", tampered),
        ("HS256", hs),
        ("garbage", "x.y.z".into()),
    ] {
        let err = auth.authenticate(Some(&bearer(&t))).await.unwrap_err();
        assert!(matches!(err, Refusal::Invalid(_)), "{what}: {err:?}");
    }
    assert_eq!(auth.authenticate(None).await.unwrap_err(), Refusal::Missing);
}

#[tokio::test]
async fn a_token_is_verified_once_and_kept_no_longer_than_it_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let auth = authenticator(&dir, |c| c.jwks_min_refresh_ms = 0);
    let mut claims = good_claims();
    claims["exp"] = json!(now_s() + 2);
    let kept = bearer(&token("k1", claims));
    assert!(auth.authenticate(Some(&kept)).await.is_ok());
    // The issuer withdraws its key, and an unknown key id makes the node load the new set.
    std::fs::write(dir.path().join("jwks.json"), r#"{"keys":[]}"#).unwrap();
    let unknown = bearer(&token("k9", good_claims()));
    assert!(auth.authenticate(Some(&unknown)).await.is_err());
    let fresh = bearer(&token("k1", good_claims()));
    assert!(
        auth.authenticate(Some(&fresh)).await.is_err(),
        "the key is gone"
    );
    // The token verified before is answered from the cache...
    assert!(auth.authenticate(Some(&kept)).await.is_ok());
    // ...but not past its expiry.
    tokio::time::sleep(std::time::Duration::from_millis(3_100)).await;
    let err = auth.authenticate(Some(&kept)).await.unwrap_err();
    assert!(matches!(err, Refusal::Invalid(_)), "{err:?}");
}

#[test]
fn settings_that_cannot_work_are_refused_by_name() {
    let issuer = |f: fn(&mut IssuerConfig)| {
        let mut i = IssuerConfig {
            issuer: ISSUER.into(),
            jwks_url: Some("https://issuer.test/jwks".into()),
            jwks_file: None,
            jwks_refresh_ms: 300_000,
            algorithms: vec!["RS256".into()],
            introspection_url: None,
            introspection_client_id: None,
            introspection_client_secret: None,
        };
        f(&mut i);
        AuthConfig {
            resource: Some(RESOURCE.into()),
            issuers: vec![i],
            ..AuthConfig::default()
        }
    };
    assert!(issuer(|_| {}).validate().is_ok());
    let bad = [
        (issuer(|i| i.algorithms = vec!["HS256".into()]), "algorithm"),
        (issuer(|i| i.algorithms.clear()), "algorithms"),
        (issuer(|i| i.jwks_file = Some("k.json".into())), "not both"),
        (issuer(|i| i.jwks_url = None), "needs jwks_url"),
        (
            issuer(|i| i.introspection_url = Some("https://i.test/introspect".into())),
            "introspection_client_id",
        ),
        (issuer(|i| i.jwks_url = Some("ftp://x".into())), "http(s)"),
        (issuer(|i| i.jwks_refresh_ms = 10), "jwks_refresh_ms"),
        (
            AuthConfig {
                resource: None,
                ..issuer(|_| {})
            },
            "auth.resource is required",
        ),
        (
            AuthConfig {
                resource: Some("mcp.test/mcp".into()),
                ..issuer(|_| {})
            },
            "auth.resource",
        ),
        (
            AuthConfig {
                resource: Some(format!("{RESOURCE}#f")),
                ..issuer(|_| {})
            },
            "auth.resource",
        ),
        (
            AuthConfig {
                leeway_s: 301,
                ..issuer(|_| {})
            },
            "leeway_s",
        ),
    ];
    for (cfg, words) in bad {
        let err = cfg.validate().unwrap_err();
        assert!(err.contains(words), "{err} (wanted {words})");
    }
}

#[test]
fn the_metadata_lives_at_the_well_known_path_suffixed_with_the_resource_path() {
    assert_eq!(
        config::metadata_path("https://mcp.test/mcp").as_deref(),
        Some("/.well-known/oauth-protected-resource/mcp")
    );
    assert_eq!(
        config::metadata_path("https://mcp.test").as_deref(),
        Some("/.well-known/oauth-protected-resource")
    );
    assert_eq!(
        config::metadata_url("http://127.0.0.1:8080/a/mcp/").as_deref(),
        Some("http://127.0.0.1:8080/.well-known/oauth-protected-resource/a/mcp")
    );
    assert_eq!(config::metadata_path("https://mcp.test/mcp?x=1"), None);
}
