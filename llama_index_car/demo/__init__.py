"""The bundled demo corpus: its spec, generated HWPX files and questions."""

from llama_index_car.demo.loader import (
    DEMO_CORPUS_DIR,
    DEMO_QUESTIONS_PATH,
    DemoQuestion,
    demo_corpus_dir,
    demo_corpus_files,
    load_demo_questions,
)

__all__ = [
    "DEMO_CORPUS_DIR",
    "DEMO_QUESTIONS_PATH",
    "DemoQuestion",
    "demo_corpus_dir",
    "demo_corpus_files",
    "load_demo_questions",
]
