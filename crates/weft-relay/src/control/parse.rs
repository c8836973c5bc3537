//! Reading one control command: its keyword, its arguments (plain words,
//! C-escaped quoted strings, `KEY=value` pairs) and, for the multi-line
//! commands that start with `+`, its body (control-spec §2.3, §2.4).

/// A command as read off the connection (CRLF or LF line ends removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The keyword, upper-cased (without a leading '+').
    pub keyword: String,
    /// The rest of the first line.
    pub args: String,
    /// The body of a multi-line (`+`) command.
    pub body: Option<String>,
}

impl Command {
    /// Split a command's text: the first line holds the keyword and the
    /// arguments; a `+` command's following lines are its body.
    pub fn parse(text: &str) -> Command {
        let (first, rest) = match text.split_once('\n') {
            Some((f, r)) => (f.trim_end_matches('\r'), Some(r)),
            None => (text.trim_end_matches('\r'), None),
        };
        let multi = first.starts_with('+');
        let first = first.trim_start_matches('+');
        let (kw, args) = match first.split_once([' ', '\t']) {
            Some((k, a)) => (k, a.trim()),
            None => (first, ""),
        };
        Command {
            keyword: kw.to_ascii_uppercase(),
            args: args.to_string(),
            body: if multi {
                rest.map(str::to_string)
            } else {
                None
            },
        }
    }
}

/// One argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arg {
    /// The key of a `KEY=value` argument.
    pub key: Option<String>,
    /// The value (unescaped if it was quoted).
    pub value: String,
    /// Whether the value was a quoted string.
    pub quoted: bool,
}

/// Split arguments into words, quoted strings and `KEY=value` pairs.
pub fn args(text: &str) -> Result<Vec<Arg>, String> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let mut key = None;
        if b[i] != b'"' {
            let start = i;
            while i < b.len() && b[i] != b' ' && b[i] != b'\t' && b[i] != b'=' {
                i += 1;
            }
            if i < b.len() && b[i] == b'=' {
                key = Some(text[start..i].to_string());
                i += 1;
            } else {
                out.push(Arg {
                    key: None,
                    value: text[start..i].to_string(),
                    quoted: false,
                });
                continue;
            }
        }
        if i < b.len() && b[i] == b'"' {
            let (value, used) = unquote(&text[i..])?;
            i += used;
            out.push(Arg {
                key,
                value,
                quoted: true,
            });
        } else {
            let start = i;
            while i < b.len() && b[i] != b' ' && b[i] != b'\t' {
                i += 1;
            }
            out.push(Arg {
                key,
                value: text[start..i].to_string(),
                quoted: false,
            });
        }
    }
    Ok(out)
}

/// Read a C-escaped quoted string at the start of `s`: its value and the
/// bytes it used.
pub fn unquote(s: &str) -> Result<(String, usize), String> {
    let b = s.as_bytes();
    if b.first() != Some(&b'"') {
        return Err("expected a quoted string".into());
    }
    let mut out = Vec::new();
    let mut i = 1;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let v = String::from_utf8(out).map_err(|_| "quoted string is not UTF-8")?;
                return Ok((v, i + 1));
            }
            b'\\' => {
                let c = *b.get(i + 1).ok_or("unterminated escape")?;
                i += 2;
                match c {
                    b'n' => out.push(b'\n'),
                    b'r' => out.push(b'\r'),
                    b't' => out.push(b'\t'),
                    b'0'..=b'7' => {
                        let mut v: u32 = (c - b'0') as u32;
                        let mut n = 1;
                        while n < 3 && i < b.len() && (b'0'..=b'7').contains(&b[i]) {
                            v = v * 8 + (b[i] - b'0') as u32;
                            i += 1;
                            n += 1;
                        }
                        out.push(u8::try_from(v).map_err(|_| "octal escape above 255")?);
                    }
                    other => out.push(other),
                }
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Err("unterminated quoted string".into())
}
