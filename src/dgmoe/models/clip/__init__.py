"""CLIP's text side, in one place (as open_clip keeps its tokenizer, zero-shot classifier and templates together):
the BPE tokenizer and its vocabulary (`tokenizer`, `vocab/`), the text tower (`text_tower`), the formats its
weights come in (`text_formats`), the zero-shot head (`zero_shot`), the prompt templates (`templates`) and a
zero-shot head as plain data with what writes it while the model is built (`head_spec`).
The image towers are the ViTs of `dgmoe.models.vit`; class names are dataset facts (`dgmoe.data.class_names`)."""
