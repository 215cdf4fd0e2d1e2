"""The exception a TODO's stub raises until the learner writes it: `raise NotDone("Block B: make_shard's split")`."""


class NotDone(NotImplementedError):
    """A TODO still blank; `what` names it. The lab reads `what`, never this message (minitrain.lab.todos.blank)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"not done yet: {what}")
        self.what = what
