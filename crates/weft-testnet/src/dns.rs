//! The question of a DNS query, for the tests' stand-in resolvers (a UDP
//! socket that answers weft's lookups on loopback).

/// The query's name, each label as sent (0x20 case kept), and where its
/// question section ends (after QTYPE and QCLASS). None if `query` is
/// too short for its own labels.
pub fn question(query: &[u8]) -> Option<(Vec<String>, usize)> {
    let mut i = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*query.get(i)?);
        i += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(query.get(i..i + len)?).to_string());
        i += len;
    }
    query.get(i..i + 4)?;
    Some((labels, i + 4))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_question_is_read_with_its_case() {
        let mut q = vec![0u8; 12];
        q.extend_from_slice(b"\x03wWw\x07example\x03com\x00\x00\x01\x00\x01");
        let (labels, end) = super::question(&q).unwrap();
        assert_eq!(labels, ["wWw", "example", "com"]);
        assert_eq!(end, q.len());
        assert!(super::question(&q[..q.len() - 1]).is_none());
        assert!(super::question(&q[..15]).is_none());
    }
}
