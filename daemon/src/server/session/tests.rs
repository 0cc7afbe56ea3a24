use super::*;

#[test]
fn tokens_match_only_when_equal() {
    assert!(tokens_match(b"secret", b"secret"));
    assert!(!tokens_match(b"secret", b"secreT"));
    assert!(!tokens_match(b"secret", b"secret2"));
    assert!(!tokens_match(b"secret", b"secre"));
    assert!(!tokens_match(b"secret", b""));
    assert!(tokens_match(b"", b""));
}

#[test]
fn session_ids_are_distinct_and_non_zero() {
    let a = new_session_id();
    let b = new_session_id();
    assert_ne!(a, b);
    assert_ne!(a, 0);
}
