"""A Hugging Face Trainer on a tiny BERT built from a config (no weights, no tokenizer): batch 2, logs every step."""
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n=4096, length=16, vocab=64):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=32)
model = BertForSequenceClassification(config)
args = TrainingArguments(output_dir="hf_out", per_device_train_batch_size=2, logging_steps=1,
                         num_train_epochs=1, report_to=[], use_cpu=True, save_strategy="no")
trainer = Trainer(model=model, args=args, train_dataset=Tokens())
trainer.train()
