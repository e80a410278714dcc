use super::pod_name;

#[test]
fn pod_name_is_the_first_line() {
    let cases = [
        ("pod-a\n", Some("pod-a")),
        ("pod-a\nping 3\n", Some("pod-a")),
        ("pod-a", None),
        ("\nping", None),
        ("", None),
    ];
    for (answer, want) in cases {
        assert_eq!(pod_name(answer), want, "answer {answer:?}");
    }
}
