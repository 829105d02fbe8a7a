"""Shared user code for every corpus case (merged into each case's tree)."""


class Echo:
    def __init__(self, label, loud=False):
        self.label = label

    async def __call__(self, request):
        return self.label


def hello(request):
    return "hello"


class NotAHandler:
    def handle(self, request):
        return "no __call__"
