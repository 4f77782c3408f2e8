# amqpd in a container: `docker build -t amqpd . && docker run -p 5672:5672 amqpd`
FROM python:3.11-slim
WORKDIR /app
COPY . /app
RUN pip install --no-cache-dir .
EXPOSE 5672
CMD ["amqpd", "--host", "0.0.0.0"]
