"""Token vocabularies: the byte string of every token id, loaded from tokenizer files.

`Vocabulary` (in `vocabulary`) is the type; one module per tokenizer format reads the file with
numpy and the standard library only: `sentencepiece` (``.model`` protobuf, through `protobuf`),
`tekken` (Mistral's JSON), `tokenizer_json` (Hugging Face) and `gguf` (a GGUF model's header);
`pieces` holds the spellings of token bytes they share, `files` the reading and error helpers.
"""

from ananke_jax._src.vocab.vocabulary import Vocabulary as Vocabulary
