use super::*;

#[test]
fn session_ids_are_distinct_and_non_zero() {
    let a = new_session_id();
    let b = new_session_id();
    assert_ne!(a, b);
    assert_ne!(a, 0);
}
