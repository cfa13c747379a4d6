"""What both kinds of ``mpbroker-groups`` print with: aligned tables, ``-`` for an
unknown value, counted nouns, and the refusal that ends a command with its exit code."""


class Refused(Exception):
    """Stop with ``code`` after printing ``lines`` to stderr."""

    def __init__(self, code: int, *lines: str):
        super().__init__(*lines)
        self.code, self.lines = code, lines


def table(headers, rows) -> str:  # as mpbroker-ctl's
    widths = [max([len(str(h))] + [len(str(r[i])) for r in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def shown(value) -> str:
    return "-" if value is None else str(value)


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"
