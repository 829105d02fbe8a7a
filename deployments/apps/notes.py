"""A FastAPI app served as a backend: routing, validation, dependencies, docs, WebSockets.

`import_path` names the app itself; it serves everything under its
endpoint's route, which it sees as its `root_path` (so `/notes/docs` shows
the OpenAPI page and its links work behind the prefix). A body that does
not match the pydantic model is answered 422 by FastAPI. A WebSocket to
`/notes/chat` stays on one replica for its lifetime: the app greets first,
echoes every message, and closes with code 4000 when told "bye".

    curl -X POST http://127.0.0.1:8000/notes/items -d '{"text": "milk"}'
    curl http://127.0.0.1:8000/notes/items/1
"""

from __future__ import annotations

import itertools
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, Field


class Note(BaseModel):
    text: str = Field(min_length=1, max_length=1000)
    tags: list[str] = []


class Store:
    """The notes of this replica (a real app would use a database)."""

    def __init__(self) -> None:
        self.notes: dict[int, Note] = {}
        self.ids = itertools.count(1)


_store = Store()


def store() -> Store:
    return _store


app = FastAPI(title="notes")


@app.post("/items", status_code=201)
def create(note: Note, db: Annotated[Store, Depends(store)]) -> dict[str, int]:
    note_id = next(db.ids)
    db.notes[note_id] = note
    return {"id": note_id}


@app.get("/items/{note_id}")
def read(note_id: int, db: Annotated[Store, Depends(store)]) -> Note:
    if note_id not in db.notes:
        raise HTTPException(status_code=404, detail=f"no note {note_id}")
    return db.notes[note_id]


@app.websocket("/chat")
async def chat(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_json({"hello": "send text; 'bye' ends the chat"})
    try:
        while True:
            text = await websocket.receive_text()
            if text == "bye":
                await websocket.close(code=4000, reason="bye")
                return
            await websocket.send_text(f"echo: {text}")
    except WebSocketDisconnect:
        return
