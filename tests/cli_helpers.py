"""What the CLI tests of bad input share: a refusal is one line on stderr and exit status 2."""


def one_line_error(capsys, rc: int, *words: str) -> str:
    """The command's stderr, asserted to be one line naming every one of `words`, after exit 2."""
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, err
    return err
