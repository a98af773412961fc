"""A tiny random-weight Llama and its tokenizer, built locally so serving tests need no download.

The weights are noise, so answers are gibberish; what tests rely on is that the model loads with
``AutoModelForCausalLM``/``AutoTokenizer``, has a chat template, generates deterministically with
greedy decoding, and is small enough (~0.5 MB) to load in well under a second.
"""

from __future__ import annotations

from pathlib import Path

_SPECIAL_TOKENS = ["<s>", "</s>", "<unk>", "<pad>"]
_VOCAB_SIZE = 512
_SEED = 1234

# Role-prefixed turns; the generation prompt ends with "assistant:" so the model continues there.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France and Berlin is the capital of Germany.",
    "Water boils at one hundred degrees Celsius at sea level.",
    "The mitochondria is the powerhouse of the cell.",
    "Python is a programming language with a large standard library.",
    "Import numpy as np and pandas as pd to analyse data.",
    "Ray Serve deploys models behind an HTTP endpoint.",
    "A language model predicts the next token from the previous ones.",
    "Hallucinations are statements that are not supported by evidence.",
    "The evidence supports the claim when the facts agree.",
    "Claim: the moon orbits the earth. Evidence: the moon is a satellite of the earth.",
    "Question: who wrote Hamlet? Answer: William Shakespeare wrote Hamlet.",
    "Summarise the article in three sentences.",
    "List five programming libraries for machine learning.",
    "The Eiffel Tower was completed in eighteen eighty nine.",
    "Mount Everest is the highest mountain above sea level.",
    "The Pacific Ocean is the largest ocean on Earth.",
    "Tokenizers split text into pieces called tokens.",
    "user: hello there\nassistant: hello, how can I help you today?",
    "user: what is two plus two?\nassistant: two plus two is four.",
    "Numbers like 1, 2, 3, 42 and 2024 appear in text too.",
    "Scientists publish papers in journals after peer review.",
    "The library was founded in the nineteenth century.",
    "She walked to the market to buy bread, cheese and apples.",
    "Rivers flow from mountains to the sea.",
    "The committee approved the budget for the next year.",
    "Transformers use attention to mix information between positions.",
    "I'm sorry, I cannot answer that question.",
    "Yes, the statement is correct. No, the statement is wrong.",
    "Biographies describe the life of a person in detail.",
]


def build_tiny_llama(path: Path | str) -> Path:
    """Train the tokenizer, build the model with a fixed seed and save both to ``path``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)

    # Byte-level BPE: every string is encodable (no <unk> at inference), like real Llama tokenizers.
    core = Tokenizer(models.BPE(unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=_VOCAB_SIZE, special_tokens=_SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator(_CORPUS, trainer=trainer)
    bos_id = core.token_to_id("<s>")
    # Raw prompts get <s> prepended like a real Llama tokenizer; chat prompts carry it in the template.
    core.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos_id)])

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>",
                                        unk_token="<unk>", pad_token="<pad>")
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=2, vocab_size=len(tokenizer), max_position_embeddings=2048,
                         bos_token_id=bos_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(_SEED)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    return out
