"""The judge prompt of the prompt-based RAGTruth detector (paper App. D asks for the same things).

Our own wording with the paper's inputs, criteria and output key: the reference (question and
passages, business data, or article), the response, the two hallucination kinds (conflict,
baseless info), the Data2txt rule that null means unknown, and a JSON object whose
``"hallucination list"`` holds spans copied from the response. The paper's and the repo's own
templates are not reproduced. Changing any wording below means a new ``TEMPLATE_ID`` (it is part of
the call-cache key and is recorded with every prediction).
"""

from __future__ import annotations

from halluscope.contract.roles import AnswerFormat
from halluscope.ragtruth.corpus import Record
from halluscope.ragtruth.taxonomy import TaskType

TEMPLATE_ID = "ragtruth-detect-v1"
LIST_KEY = "hallucination list"
# the judge's answer as a JSON schema, where the endpoint enforces one (the parser reads it either way)
ANSWER_FORMAT = AnswerFormat.json_object("hallucination_list",
                                         {LIST_KEY: {"type": "array", "items": {"type": "string"}}})

# (what the response is, what it must stick to)
_NAMES = {
    TaskType.QA: ("answer", "the passages"),
    TaskType.DATA2TXT: ("overview", "the business data"),
    TaskType.SUMMARY: ("summary", "the article"),
}


def instructions(task: TaskType) -> str:
    thing, ref = _NAMES[task]
    null_rule = ("In the data, null (or None) means the value is unknown: it does not mean no, false "
                 "or absent.\n") if task is TaskType.DATA2TXT else ""
    return (
        f"Find every part of the {thing} that is a hallucination of either kind:\n"
        f"1. conflict: it contradicts {ref} or gets a fact from {ref} wrong;\n"
        f"2. baseless info: it states something that cannot be found in or inferred from {ref}.\n"
        f"{null_rule}"
        f"Copy each hallucinated span word for word from the {thing}. Reply with one JSON object and nothing "
        f'else: {{"{LIST_KEY}": ["<span>", ...]}}. If there is no hallucination, reply {{"{LIST_KEY}": []}}.')


def judge_prompt(record: Record) -> str:
    task = record.task_type
    info = record.source.source_info
    response = record.response.strip()
    if task is TaskType.QA:
        body = (f"Question:\n{info['question'].strip()}\n\nPassages:\n{info['passages'].strip()}\n\n"
                f"Answer to check:\n{response}")
    elif task is TaskType.DATA2TXT:
        body = (f"Business data (JSON):\n{record.source.context_text()}\n\n"
                f"Overview written from this data, to check:\n{response}")
    else:
        body = f"Article:\n{info.strip()}\n\nSummary to check:\n{response}"
    return f"{body}\n\n{instructions(task)}\n"
