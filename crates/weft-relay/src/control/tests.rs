//! The control session in memory: authentication as C Tor's
//! control_auth.c, replies and closes, arguments.

use weft_crypto::control_auth::{hash_password, safecookie_hashes, HashedPassword};

use super::parse::{args, Command};
use super::*;

struct Info;

impl ControlInfo for Info {
    fn getinfo(&self, key: &str) -> Result<String, InfoError> {
        match key {
            "version" => Ok(version_string()),
            "config-text" => Ok("ORPort 9001\n.hidden\nNickname x\n".into()),
            "address" => Err(InfoError::Unavailable("Address unknown".into())),
            _ => Err(InfoError::Unrecognized),
        }
    }
    fn getconf(&self, key: &str) -> Option<(String, Vec<String>)> {
        match key.to_ascii_lowercase().as_str() {
            "nickname" => Some(("Nickname".into(), vec!["weft1".into()])),
            "exitpolicy" => Some(("ExitPolicy".into(), vec![])),
            "log" => Some((
                "Log".into(),
                vec!["notice stdout".into(), "warn file /x".into()],
            )),
            _ => None,
        }
    }
}

const COOKIE: [u8; 32] = [7; 32];

fn cookie_auth() -> AuthSettings {
    AuthSettings {
        cookie: Some(COOKIE),
        cookie_path: "/var/lib/weft/control_auth_cookie".into(),
        passwords: vec![],
    }
}

fn run(s: &mut Session, auth: &AuthSettings, cmd: &str) -> Output {
    s.on_command(cmd, auth, &Info)
}

#[test]
fn nothing_before_authentication() {
    let auth = cookie_auth();
    let mut s = Session::new();
    let o = run(&mut s, &auth, "GETINFO version");
    assert_eq!(o.reply, "514 Authentication required.\r\n");
    assert!(o.close);
    // PROTOCOLINFO once, then only authentication.
    let mut s = Session::new();
    let o = run(&mut s, &auth, "PROTOCOLINFO 1");
    assert!(!o.close);
    assert_eq!(
        o.reply,
        format!(
            "250-PROTOCOLINFO 1\r\n250-AUTH METHODS=COOKIE,SAFECOOKIE COOKIEFILE=\"/var/lib/weft/control_auth_cookie\"\r\n250-VERSION Tor=\"{}\"\r\n250 OK\r\n",
            version_string()
        )
    );
    assert!(run(&mut s, &auth, "PROTOCOLINFO").close);
    let mut s = Session::new();
    assert_eq!(
        run(&mut s, &auth, "PROTOCOLINFO x").reply,
        "513 No such version \"x\"\r\n"
    );
    assert_eq!(
        run(&mut s, &auth, "quit").reply,
        "250 closing connection\r\n"
    );
}

#[test]
fn cookie_and_its_failures() {
    let auth = cookie_auth();
    let mut s = Session::new();
    let o = run(
        &mut s,
        &auth,
        &format!("AUTHENTICATE {}", hex::encode(COOKIE)),
    );
    assert_eq!(o.reply, "250 OK\r\n");
    assert!(s.authenticated());
    assert!(run(&mut s, &auth, "GETINFO version")
        .reply
        .starts_with("250-version=0.4.9.11 (weft-"));
    for (bad, why) in [
        (
            "AUTHENTICATE 0011",
            "Wrong length on authentication cookie.",
        ),
        (
            &format!("AUTHENTICATE {}", hex::encode([8u8; 32])) as &str,
            "Authentication cookie did not match expected value.",
        ),
        (
            "AUTHENTICATE \"password\"",
            "Wrong length on authentication cookie.",
        ),
        ("AUTHENTICATE", "Wrong length on authentication cookie."),
    ] {
        let mut s = Session::new();
        let o = run(&mut s, &auth, bad);
        assert_eq!(
            o.reply,
            format!("515 Authentication failed: {why}\r\n"),
            "{bad}"
        );
        assert!(o.close && !s.authenticated());
    }
    let mut s = Session::new();
    let o = run(&mut s, &auth, "AUTHENTICATE zz");
    assert!(o.reply.starts_with("551 Invalid hexadecimal encoding."));
    assert!(o.close);
    let mut s = Session::new();
    assert!(run(&mut s, &auth, "AUTHENTICATE a b")
        .reply
        .starts_with("512 Too many"));
    // No method configured: anyone who can connect (C Tor's NULL method).
    let mut s = Session::new();
    let none = AuthSettings::default();
    assert!(run(&mut s, &none, "PROTOCOLINFO")
        .reply
        .contains("METHODS=NULL\r\n"));
    assert_eq!(run(&mut s, &none, "AUTHENTICATE").reply, "250 OK\r\n");
}

#[test]
fn safecookie() {
    let auth = cookie_auth();
    let mut s = Session::new();
    let nonce = [3u8; 32];
    let o = run(
        &mut s,
        &auth,
        &format!("AUTHCHALLENGE SAFECOOKIE {}", hex::encode(nonce)),
    );
    let r = o.reply.trim_end();
    let sh = r
        .split("SERVERHASH=")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    let sn = r.split("SERVERNONCE=").nth(1).unwrap();
    let server_nonce: [u8; 32] = hex::decode(sn).unwrap().try_into().unwrap();
    let (server, client) = safecookie_hashes(&COOKIE, &nonce, &server_nonce);
    assert_eq!(sh, hex::encode_upper(server));
    // The plain cookie no longer works on this connection: only the hash.
    let mut s2 = Session::new();
    run(
        &mut s2,
        &auth,
        &format!("AUTHCHALLENGE SAFECOOKIE {}", hex::encode(nonce)),
    );
    let o = run(
        &mut s2,
        &auth,
        &format!("AUTHENTICATE {}", hex::encode(COOKIE)),
    );
    assert_eq!(
        o.reply,
        "515 Authentication failed: Safe cookie response did not match expected value.\r\n"
    );
    assert_eq!(
        run(
            &mut s,
            &auth,
            &format!("AUTHENTICATE {}", hex::encode(client))
        )
        .reply,
        "250 OK\r\n"
    );
    // Quoted nonce, wrong method, no cookie configured.
    let mut s = Session::new();
    assert!(run(&mut s, &auth, "AUTHCHALLENGE SAFECOOKIE \"abc\"")
        .reply
        .starts_with("250 AUTHCHALLENGE"));
    let mut s = Session::new();
    assert!(run(&mut s, &auth, "AUTHCHALLENGE COOKIE 00")
        .reply
        .starts_with("513 "));
    let mut s = Session::new();
    let o = run(
        &mut s,
        &AuthSettings::default(),
        "AUTHCHALLENGE SAFECOOKIE 00",
    );
    assert_eq!(o.reply, "515 Cookie authentication is disabled\r\n");
    assert!(o.close);
}

#[test]
fn hashed_password() {
    let hashed = hash_password(b"s3cret pass", [1, 2, 3, 4, 5, 6, 7, 8]);
    let auth = AuthSettings {
        passwords: vec![HashedPassword::parse(&hashed).unwrap()],
        ..AuthSettings::default()
    };
    let mut s = Session::new();
    assert!(run(&mut s, &auth, "PROTOCOLINFO")
        .reply
        .contains("METHODS=HASHEDPASSWORD\r\n"));
    assert_eq!(
        run(&mut s, &auth, "AUTHENTICATE \"s3cret pass\"").reply,
        "250 OK\r\n"
    );
    let mut s = Session::new();
    let hex_pw = hex::encode("s3cret pass");
    assert_eq!(
        run(&mut s, &auth, &format!("AUTHENTICATE {hex_pw}")).reply,
        "250 OK\r\n"
    );
    let mut s = Session::new();
    let o = run(&mut s, &auth, "AUTHENTICATE \"wrong\"");
    assert_eq!(o.reply, "515 Authentication failed: Password did not match HashedControlPassword value from configuration\r\n");
    // Both methods: either works, neither says both.
    let both = AuthSettings {
        cookie: Some(COOKIE),
        ..auth.clone()
    };
    let mut s = Session::new();
    assert_eq!(
        run(&mut s, &both, "AUTHENTICATE \"s3cret pass\"").reply,
        "250 OK\r\n"
    );
    let mut s = Session::new();
    assert_eq!(
        run(
            &mut s,
            &both,
            &format!("AUTHENTICATE {}", hex::encode(COOKIE))
        )
        .reply,
        "250 OK\r\n"
    );
    let mut s = Session::new();
    assert!(run(&mut s, &both, "AUTHENTICATE \"x\"")
        .reply
        .contains("*or* authentication cookie"));
}

fn open() -> (Session, AuthSettings) {
    let auth = AuthSettings::default();
    let mut s = Session::new();
    run(&mut s, &auth, "AUTHENTICATE");
    (s, auth)
}

#[test]
fn getinfo_getconf_replies() {
    let (mut s, auth) = open();
    assert_eq!(
        run(&mut s, &auth, "GETINFO config-text").reply,
        "250+config-text=\r\nORPort 9001\r\n..hidden\r\nNickname x\r\n.\r\n250 OK\r\n"
    );
    assert_eq!(
        run(&mut s, &auth, "GETINFO version nope").reply,
        "552 Unrecognized key \"nope\"\r\n"
    );
    assert_eq!(
        run(&mut s, &auth, "GETINFO address").reply,
        "551 Address unknown\r\n"
    );
    assert_eq!(
        run(&mut s, &auth, "GETCONF nickname").reply,
        "250 Nickname=weft1\r\n"
    );
    assert_eq!(
        run(&mut s, &auth, "GETCONF exitpolicy").reply,
        "250 ExitPolicy\r\n"
    );
    assert_eq!(
        run(&mut s, &auth, "GETCONF Log Nickname").reply,
        "250-Log=notice stdout\r\n250-Log=warn file /x\r\n250 Nickname=weft1\r\n"
    );
    assert_eq!(
        run(&mut s, &auth, "GETCONF Nickname Foo Bar").reply,
        "552-Unrecognized configuration key \"Foo\"\r\n552 Unrecognized configuration key \"Bar\"\r\n"
    );
    assert_eq!(run(&mut s, &auth, "GETCONF").reply, "250 OK\r\n");
}

#[test]
fn events_signals_and_unknown_commands() {
    let (mut s, auth) = open();
    assert_eq!(
        run(&mut s, &auth, "SETEVENTS BW notice WARN").reply,
        "250 OK\r\n"
    );
    assert!(s.events.has("BW") && s.events.has("NOTICE") && !s.events.has("ERR"));
    assert_eq!(
        run(&mut s, &auth, "SETEVENTS BW FOO").reply,
        "552 Unrecognized event \"FOO\"\r\n"
    );
    assert!(s.events.has("BW"), "a refused SETEVENTS keeps the old set");
    assert_eq!(run(&mut s, &auth, "SETEVENTS").reply, "250 OK\r\n");
    assert!(s.events.is_empty());
    let o = run(&mut s, &auth, "SIGNAL HUP");
    assert_eq!(
        (o.reply.as_str(), o.signal),
        ("250 OK\r\n", Some(Signal::Reload))
    );
    assert_eq!(run(&mut s, &auth, "SIGNAL term").signal, Some(Signal::Halt));
    assert_eq!(
        run(&mut s, &auth, "SIGNAL FOO").reply,
        "552 Unrecognized signal code \"FOO\"\r\n"
    );
    assert!(run(&mut s, &auth, "SIGNAL DEBUG").reply.starts_with("551 "));
    let o = run(&mut s, &auth, "SETCONF Nickname=x");
    assert_eq!(o.reply, "510 Unrecognized command \"SETCONF\"\r\n");
    assert!(!o.close);
    assert_eq!(
        run(&mut s, &auth, "USEFEATURE VERBOSE_NAMES").reply,
        "250 OK\r\n"
    );
    assert_eq!(
        run(&mut s, &auth, "+LOADCONF\nNickname x\n").reply,
        "510 Unrecognized command \"LOADCONF\"\r\n"
    );
    assert_eq!(bw_event(1, 2), "650 BW 1 2\r\n");
    assert_eq!(
        log_event(Severity::Warn, "two\nlines\n"),
        "650 WARN two lines\r\n"
    );
    assert_eq!(signal_event(Signal::Reload), "650 SIGNAL RELOAD\r\n");
}

#[test]
fn argument_parsing() {
    let a = args(r#"SAFECOOKIE "a \"q\" \n\101" KEY=v K2="x y""#).unwrap();
    assert_eq!(a.len(), 4);
    assert_eq!(a[1].value, "a \"q\" \nA");
    assert!(a[1].quoted);
    assert_eq!(
        (a[2].key.as_deref(), a[2].value.as_str()),
        (Some("KEY"), "v")
    );
    assert_eq!(
        (a[3].key.as_deref(), a[3].value.as_str()),
        (Some("K2"), "x y")
    );
    assert!(args("\"open").is_err());
    assert!(args("\"\\777\"").is_err());
    let c = Command::parse("+POSTDESCRIPTOR purpose=general\r\nrouter x\r\n");
    assert_eq!(c.keyword, "POSTDESCRIPTOR");
    assert_eq!(c.body.as_deref(), Some("router x\r\n"));
    assert_eq!(quoted("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\001\"");
}

#[path = "../../../../fuzz/corpus_archive.rs"]
mod corpus_archive;

#[test]
fn fuzz_corpus_replays() {
    let inputs = corpus_archive::inputs("control_commands");
    for (_, data) in &inputs {
        super::fuzz_commands(data);
    }
    assert!(inputs.len() >= 2, "{} inputs", inputs.len());
}
